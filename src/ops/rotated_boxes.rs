//! Kernel: `torchvision::box_iou_rotated(boxes1 [N, 5], boxes2 [M, 5]) -> [N, M] float32`, the
//! IoU of rotated boxes `(x_center, y_center, width, height, angle in degrees)`, as torchvision's
//! CPU kernel (Detectron2's) computes it in the boxes' precision: corners of both boxes, edge
//! intersections and contained corners (with its epsilons), the Graham-scan convex hull of
//! those points and its area.

use super::kernels::{not_implemented_for, shape_mismatch};
use super::linalg::{dispatch_real_compute, Real};
use super::{Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::TensorError;
use crate::tensor::{DType, Tensor};
use crate::values::IValue;
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};

#[derive(Clone, Copy, Default)]
struct Point<T> {
    x: T,
    y: T,
}

impl<T: Real> Point<T> {
    fn new(x: T, y: T) -> Self {
        Point { x, y }
    }
    fn sub(self, o: Self) -> Self {
        Point::new(self.x - o.x, self.y - o.y)
    }
    fn add(self, o: Self) -> Self {
        Point::new(self.x + o.x, self.y + o.y)
    }
    fn scale(self, c: T) -> Self {
        Point::new(self.x * c, self.y * c)
    }
}

fn dot<T: Real>(a: Point<T>, b: Point<T>) -> T {
    a.x * b.x + a.y * b.y
}

fn cross<T: Real>(a: Point<T>, b: Point<T>) -> T {
    a.x * b.y - b.x * a.y
}

/// `[x_ctr, y_ctr, w, h, angle]` -> the four corners.
fn corners<T: Real>(b: &[T; 5]) -> [Point<T>; 4] {
    let theta = b[4].as_f64() * 0.01745329251;
    let half = T::from_f64(0.5);
    let cos2 = T::from_f64(theta.cos()) * half;
    let sin2 = T::from_f64(theta.sin()) * half;
    let two = T::from_f64(2.0);
    let p0 = Point::new(
        b[0] + sin2 * b[3] + cos2 * b[2],
        b[1] + cos2 * b[3] - sin2 * b[2],
    );
    let p1 = Point::new(
        b[0] - sin2 * b[3] + cos2 * b[2],
        b[1] - cos2 * b[3] - sin2 * b[2],
    );
    let p2 = Point::new(two * b[0] - p0.x, two * b[1] - p0.y);
    let p3 = Point::new(two * b[0] - p1.x, two * b[1] - p1.y);
    [p0, p1, p2, p3]
}

/// Corners of `pts` inside the rectangle `rect` (within torchvision's epsilon), appended.
fn contained<T: Real>(pts: &[Point<T>; 4], rect: &[Point<T>; 4], out: &mut Vec<Point<T>>) {
    // (torchvision compares with a double epsilon: the T values promote)
    let eps = 1e-5;
    let ab = rect[1].sub(rect[0]);
    let da = rect[0].sub(rect[3]);
    let (ab_ab, ad_ad) = (dot(ab, ab).as_f64(), dot(da, da).as_f64());
    for &p in pts {
        let ap = p.sub(rect[0]);
        let (ap_ab, ap_ad) = (dot(ap, ab).as_f64(), (-dot(ap, da)).as_f64());
        if ap_ab > -eps && ap_ad > -eps && ap_ab < ab_ab + eps && ap_ad < ad_ad + eps {
            out.push(p);
        }
    }
}

fn intersection_points<T: Real>(p1: &[Point<T>; 4], p2: &[Point<T>; 4]) -> Vec<Point<T>> {
    let edge = |p: &[Point<T>; 4], i: usize| p[(i + 1) % 4].sub(p[i]);
    let eps = 1e-5;
    let mut out = Vec::with_capacity(24);
    for i in 0..4 {
        let v1 = edge(p1, i);
        for j in 0..4 {
            let v2 = edge(p2, j);
            let det = cross(v2, v1);
            if det.abs().as_f64() <= 1e-14 {
                continue;
            }
            let v12 = p2[j].sub(p1[i]);
            let t1 = cross(v2, v12) / det;
            let t2 = cross(v1, v12) / det;
            let (f1, f2) = (t1.as_f64(), t2.as_f64());
            if f1 > -eps && f1 < 1.0 + eps && f2 > -eps && f2 < 1.0 + eps {
                out.push(p1[i].add(v1.scale(t1)));
            }
        }
    }
    contained(p1, p2, &mut out);
    contained(p2, p1, &mut out);
    out
}

/// The area of the convex hull of `p` (torchvision's Graham scan, points shifted to the
/// lowest one).
fn hull_area<T: Real>(p: &[Point<T>]) -> T {
    let n = p.len();
    let mut t = 0;
    for i in 1..n {
        if p[i].y < p[t].y || (p[i].y == p[t].y && p[i].x < p[t].x) {
            t = i;
        }
    }
    let start = p[t];
    let mut q: Vec<Point<T>> = p.iter().map(|&v| v.sub(start)).collect();
    q.swap(0, t);
    let mut dist: Vec<T> = q.iter().map(|&v| dot(v, v)).collect();
    for i in 1..n.saturating_sub(1) {
        for j in i + 1..n {
            let c = cross(q[i], q[j]).as_f64();
            if c < -1e-6 || (c.abs() < 1e-6 && dist[i] > dist[j]) {
                q.swap(i, j);
                dist.swap(i, j);
            }
        }
    }
    let dist: Vec<T> = q.iter().map(|&v| dot(v, v)).collect();
    let Some(k) = (1..n).find(|&k| dist[k].as_f64() > 1e-8) else {
        return T::zero();
    };
    let mut hull = vec![q[0], q[k]];
    for &qi in &q[k + 1..] {
        while hull.len() > 1 {
            let m = hull.len();
            let (a, b) = (qi.sub(hull[m - 2]), hull[m - 1].sub(hull[m - 2]));
            if a.x * b.y >= b.x * a.y {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(qi);
    }
    if hull.len() <= 2 {
        return T::zero();
    }
    let mut area = T::zero();
    for i in 1..hull.len() - 1 {
        area += cross(hull[i].sub(hull[0]), hull[i + 1].sub(hull[0])).abs();
    }
    area / T::from_f64(2.0)
}

fn iou<T: Real>(b1: &[T], b2: &[T]) -> T {
    // centers shifted to their midpoint (in double) for precision
    let sx = (b1[0].as_f64() + b2[0].as_f64()) / 2.0;
    let sy = (b1[1].as_f64() + b2[1].as_f64()) / 2.0;
    let shifted = |b: &[T]| {
        [
            T::from_f64(b[0].as_f64() - sx),
            T::from_f64(b[1].as_f64() - sy),
            b[2],
            b[3],
            b[4],
        ]
    };
    let (r1, r2) = (shifted(b1), shifted(b2));
    let (area1, area2) = (r1[2] * r1[3], r2[2] * r2[3]);
    if area1.as_f64() < 1e-14 || area2.as_f64() < 1e-14 {
        return T::zero();
    }
    let pts = intersection_points(&corners(&r1), &corners(&r2));
    let inter = if pts.len() <= 2 {
        T::zero()
    } else {
        hull_area(&pts)
    };
    let base = area1 + area2 - inter;
    let v = if base.as_f64() > 1e-14 {
        inter / base
    } else {
        T::zero()
    };
    v.max(T::zero()).min(T::one())
}

fn box_iou_rotated(a: &mut Args) -> crate::Result<IValue> {
    let (b1, b2) = (a.tensor(0)?, a.tensor(1)?);
    for (name, b) in [("boxes1", &b1), ("boxes2", &b2)] {
        if b.dim() != 2 || b.shape()[1] != 5 {
            return Err(shape_mismatch(
                a.op,
                format!("{name} (N, 5)"),
                &[b.shape().first().copied().unwrap_or(0), 5],
                b.shape(),
            ));
        }
    }
    if b1.dtype() != b2.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: b1.dtype(),
            got: b2.dtype(),
        }
        .into());
    }
    if !matches!(b1.dtype(), DType::Float32 | DType::Float64) {
        return Err(not_implemented_for("box_iou_rotated_cpu", b1.dtype()));
    }
    let (n, m) = (b1.shape()[0], b2.shape()[0]);
    let out: Vec<f32> = dispatch_real_compute!(b1.dtype(), a.op, |T| {
        let x1 = b1.contiguous()?.to_vec::<T>()?;
        let x2 = b2.contiguous()?.to_vec::<T>()?;
        let mut out = Vec::with_capacity(n * m);
        for i in 0..n {
            for j in 0..m {
                out.push(iou(&x1[i * 5..i * 5 + 5], &x2[j * 5..j * 5 + 5]).as_f64() as f32);
            }
        }
        Ok::<_, crate::Error>(out)
    })?;
    Ok(IValue::Tensor(Tensor::from_vec(out, &[n, m])?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("torchvision::box_iou_rotated", box_iou_rotated);
}
