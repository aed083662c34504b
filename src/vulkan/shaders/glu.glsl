// glu.glsl: the activations of a gated FFN, g' = act(g) * u, shared by silu_mul.comp,
// gelu_mul.comp and the fused GLU builds of matvec.comp and matmul_rows.comp, so that
// the fused and the separate ops round alike.
//
// gelu: GELU's tanh approximation, 0.5 a (1 + tanh(z)), z = sqrt(2/pi) (a + 0.044715 a^3).
// 0.5 (1 + tanh(z)) is the logistic 1 / (1 + e^(-2z)), evaluated as such: a driver's
// tanh may compute (e^2z - 1) / (e^2z + 1), which is inf / inf = NaN once e^2z
// overflows (|a| above about 10). z is clamped to +-30, where the logistic is within
// 1e-26 of its limit 0 or 1, so that e^(-2z) stays finite (a^3 overflowing to inf
// gives z = 30) and no driver's division sees an infinity.

float silu_mul(float a, float u) { return a / (1.0 + exp(-a)) * u; }

const float SQRT_2_OVER_PI = 0.79788456080286536;

float gelu_mul(float a, float u) {
    float z = clamp(SQRT_2_OVER_PI * (a + 0.044715 * a * a * a), -30.0, 30.0);
    return a / (1.0 + exp(-2.0 * z)) * u;
}
