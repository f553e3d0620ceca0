#!/usr/bin/python3
"""Fits the Mills' ratio polynomial of gelu's float derivative (ops/activation_kernels.cpp,
mills_ratio): M(a) = (1 - Phi(a)) / phi(a) on [0, hi], a polynomial in a - mid, by least squares
on Chebyshev nodes weighted for relative error, against math.erfc. For each degree from 10 to 18
it prints the worst relative error of M in float32 ulps (what gelu' inherits for x < 0) and the
error it gives Phi for x > 0 in ulps of Phi; for the chosen degree it prints the coefficients,
highest first, as the kernel's Horner chain lists them.

    /usr/bin/python3 tools/fit_mills_ratio.py 5.6 16 2     # hi, degree, mid: the kernel's fit
"""
import math, sys, numpy as np
f32 = np.float32
def M(a): return np.array([0.5*math.erfc(t/math.sqrt(2)) * math.sqrt(2*math.pi) * math.exp(t*t/2) for t in a])
def horner32(c, v):
    v = v.astype(np.float32)
    p = np.full_like(v, f32(c[-1]))
    for ck in c[-2::-1]:
        p = (p.astype(np.float64)*v + np.float64(f32(ck))).astype(np.float32)
    return p
lo, hi = 0.0, float(sys.argv[1])
mid = f32(float(sys.argv[3])) if len(sys.argv) > 3 else f32((lo+hi)/2)
for deg in range(10, 19):
    N = 6000
    k = np.arange(N)
    a = (lo+hi)/2 + (hi-lo)/2*np.cos(np.pi*(k+0.5)/N)
    w = 1.0/M(a)
    V = np.vander(a - float(mid), deg+1, increasing=True)
    c, *_ = np.linalg.lstsq(V*w[:,None], M(a)*w, rcond=None)
    aa = np.linspace(lo, hi, 200001)
    got = horner32(c, (aa.astype(np.float32) - mid)).astype(np.float64)
    ref = M(aa.astype(np.float32).astype(np.float64))
    rel = np.abs(got-ref)/ref
    pdf = np.exp(-aa*aa/2)/math.sqrt(2*math.pi)
    Phi = 1 - pdf*ref
    abspos = np.abs(got-ref)*pdf / (np.spacing(Phi.astype(np.float32)).astype(np.float64))
    print(deg, "rel err of M (x<0) in ulps %.3g" % (rel.max()/2**-24), "x>0 Phi err in ulps: %.3g" % abspos.max())
    if deg == int(sys.argv[2]):
        print("mid", repr(float(mid)))
        for ck in c[::-1]: print("%.9ef" % f32(ck))
