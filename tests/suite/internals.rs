//! Unit-level checks of the lexer, printers, type annotations and schema parser, kept in the
//! integration suite so the library needs no separate test harness (one build, not two).

mod lexer {
    use tsrun::internals::frontend::lexer::*;

    fn kinds(text: &str) -> Vec<Tok> {
        tokenize(text)
            .map(|v| v.into_iter().map(|(_, t, _)| t).collect())
            .unwrap_or_default()
    }

    #[test]
    fn layout_tokens() {
        let toks = kinds("def f(x,\n      y):\n  # c\n\n  return x\nz = 1\n");
        assert!(toks.contains(&Tok::Indent));
        assert_eq!(toks.iter().filter(|t| **t == Tok::Dedent).count(), 1);
        assert_eq!(toks.iter().filter(|t| **t == Tok::Newline).count(), 3);
    }

    #[test]
    fn literals() {
        assert_eq!(
            kinds(r#""a\'b\n\101" 0.10000000000000001 1e+30 inf 3 2.5j"#),
            vec![
                Tok::Str("a'b\nA".into()),
                Tok::Float(0.1),
                Tok::Float(1e30),
                Tok::Float(f64::INFINITY),
                Tok::Int(3),
                Tok::Imag(2.5),
                Tok::Newline
            ]
        );
        assert_eq!(
            kinds("'''x\"y'''"),
            vec![Tok::Str("x\"y".into()), Tok::Newline]
        );
    }
}

mod frontend {
    use tsrun::internals::frontend::*;

    #[test]
    fn qualnames() {
        assert_eq!(
            module_qualname("code/__torch__/torch/nn/modules/linear.py").as_deref(),
            Some("__torch__.torch.nn.modules.linear")
        );
        assert_eq!(
            module_qualname("net/code/__torch__.py").as_deref(),
            Some("__torch__")
        );
        assert_eq!(module_qualname("net/data.pkl"), None);
    }
}

mod parse_graph {
    use tsrun::internals::ir::parse_graph::*;

    use tsrun::internals::ir::printer::print_graph;
    use tsrun::internals::ir::printer::PrintOptions;

    #[test]
    fn round_trip_small_graph() {
        let text = "graph(%self.1 : __torch__.M,\n      %x.1 : Tensor):\n  %2 : bool = prim::Constant[value=1]() # m.py:3:4\n  %s : str = prim::Constant[value=\"a\\\"b\\n\"]()\n  %t : (float, int) = prim::Constant[value=(1.5, 2)]()\n  %4 : NoneType = prim::Constant()\n  %y : Tensor = prim::If(%2) # m.py:4:8\n    block0():\n      %5 : Tensor = aten::relu(%x.1) # m.py:5:12\n      -> (%5)\n    block1():\n      -> (%x.1)\n   = prim::SetAttr[name=\"w\"](%self.1, %y)\n  %l : int[]? = prim::Constant[value=[1, 2]]()\n  return (%y)\n";
        let g = parse_graph(text).expect("parses");
        assert_eq!(print_graph(&g, PrintOptions::default()), text);
    }
}

mod printer {
    use tsrun::internals::ir::printer::quoted_string;
    use tsrun::internals::values::format::*;

    #[test]
    fn doubles_as_pytorch_prints_them() {
        assert_eq!(fmt_double(0.1), "0.10000000000000001");
        assert_eq!(fmt_double(2.0), "2.");
        assert_eq!(fmt_double(1e-8), "1e-08");
        assert_eq!(fmt_double(2.5e20), "2.5e+20");
        assert_eq!(fmt_double(f64::INFINITY), "inf");
        assert_eq!(fmt_double(-f64::NAN), "-nan");
        assert_eq!(fmt_g(0.1, 6), "0.1");
        assert_eq!(fmt_g(123456789.0, 6), "1.23457e+08");
        assert_eq!(quoted_string("a\"b'\n"), "\"a\\\"b\\'\\n\"");
    }
}

mod types {
    use tsrun::internals::values::types::*;

    #[test]
    fn annotation_round_trip() {
        for s in [
            "List[str]",
            "Dict[str, Tensor]",
            "Optional[Tuple[int, float]]",
            "__torch__.foo.Bar",
            "Tuple[()]",
        ] {
            assert_eq!(parse_annotation(s).unwrap().annotation_str(), s);
        }
        assert_eq!(
            parse_annotation("Optional[List[int]]").unwrap().to_string(),
            "int[]?"
        );
    }
}

mod schema {
    use tsrun::internals::ops::schema::*;
    use tsrun::internals::values::types::Type;
    use tsrun::IValue;

    #[test]
    fn parses_common_forms() {
        let s = parse_schema(
            "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
        )
        .unwrap();
        assert_eq!(s.qualified_name(), "aten::add.Tensor");
        assert_eq!(s.arguments.len(), 3);
        assert!(s.arguments[2].kwarg_only);
        assert_eq!(
            s.arguments[2].default.as_ref().and_then(IValue::as_int),
            Some(1)
        );

        let s = parse_schema("aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor").unwrap();
        assert_eq!(s.arguments[1].fixed_len, Some(2));
        let pad = s.arguments[3].default.clone().unwrap();
        assert_eq!(pad.as_list().map(|l| l.len()), Some(2));

        let s = parse_schema(
            "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
        )
        .unwrap();
        assert_eq!(s.returns[0].ty, Type::list(Type::Tensor));

        let s = parse_schema("aten::sort.str(str[](a!) self, bool reverse=False) -> ()").unwrap();
        assert!(s.arguments[0].is_write && s.returns.is_empty());

        let s = parse_schema("aten::format(str self, ...) -> str").unwrap();
        assert!(s.is_vararg);

        let s = parse_schema("aten::items.str(Dict(str, t) self) -> ((str, t)[])").unwrap();
        assert_eq!(
            s.returns[0].ty,
            Type::list(Type::Tuple(vec![Type::Str, Type::Var("t".into())]))
        );
        // PyTorch parses this default to the 5 characters " \n\t\x0c\x0b" (checked with
        // torch._C._jit_get_all_schemas(): `\f` and `\v` are escapes too).
        let s = parse_schema(r#"aten::strip(str self, str chars=" \n\t\f\v") -> str"#).unwrap();
        assert_eq!(
            s.arguments[1].default.as_ref().and_then(|v| v.as_str()),
            Some(" \n\t\x0c\x0b")
        );
    }
}

/// ATen's tensor formatter for small tensor constants in graph text, against the texts PyTorch
/// prints (`fixtures/gen_aten_format.py` -> `fixtures/printing/aten_format.json`).
mod aten_format {
    use tsrun::internals::tensor::{DType, Tensor};
    use tsrun::internals::values::aten_format::{format_tensor, parse_tensor};

    fn dtype(name: &str) -> DType {
        match name {
            "int64" => DType::Int64,
            "int32" => DType::Int32,
            "float32" => DType::Float32,
            "float64" => DType::Float64,
            "bool" => DType::Bool,
            other => panic!("golden dtype {other} not mapped in the test"),
        }
    }

    /// Parsing the text and printing the result again gives the same text.
    fn round_trips(s: &str) {
        let (t, used) = parse_tensor(s).expect("recognized").expect("parses");
        assert_eq!(used, s.len(), "{s}");
        assert_eq!(format_tensor(&t).as_deref(), Some(s));
    }

    #[test]
    fn layouts_match_pytorch() {
        let path = crate::common::fixtures_dir().join("printing/aten_format.json");
        let text = std::fs::read_to_string(path).expect("aten_format.json");
        let cases: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let cases = cases.as_array().expect("a list of cases");
        assert!(!cases.is_empty());
        for case in cases {
            let values: Vec<f64> = serde_json::from_value(case["values"].clone()).expect("values");
            let shape: Vec<usize> = serde_json::from_value(case["shape"].clone()).expect("shape");
            let want = case["text"].as_str().expect("text");
            let t = Tensor::from_vec(values, &shape)
                .expect("tensor")
                .to_dtype(dtype(case["dtype"].as_str().expect("dtype")))
                .expect("dtype");
            assert_eq!(format_tensor(&t).as_deref(), Some(want), "{case}");
            // the text keeps 4 decimals: it reads back to the same tensor (and so prints the
            // same) when those hold every value
            let (parsed, _) = parse_tensor(want).expect("recognized").expect("parses");
            let exact = parsed.to_vec::<f64>().ok() == t.to_vec::<f64>().ok();
            if exact {
                round_trips(want);
            }
        }
    }

    #[test]
    fn other_values_are_not_tensors() {
        for s in [
            "[1, 2]]()",
            "{1.5}]()",
            "\"a [ CPUFloatType{2} ]\"]()",
            "-1]()",
            "[ }CPUFloatType{2} ]",
        ] {
            assert!(parse_tensor(s).is_none(), "{s}");
        }
        assert!(parse_tensor(" 1  2 [ CPUFloatType{3} ]]()")
            .expect("recognized")
            .is_err());
    }
}
