// dequant_up.glsl: dequant.glsl a second time, for a second weight of the same type at
// binding U_BINDING: the fused GLU builds read the gate at W_BINDING and the up
// projection here, in one dispatch. Every name dequant.glsl declares gets the suffix
// _up (dq32_up, dq4_tail_up, ...), so both copies live in one shader with no runtime
// cost; its macros (QK, BLOCK, ...) are redefined to the same values, which the
// preprocessor allows. Include it after dequant.glsl, which then has read
// W_BINDING: it is left undefined.

#define W16 W16_up
#define W32 W32_up
#define w16 w16_up
#define w32 w32_up
#define wd wd_up
#define f16_at f16_at_up
#define u32_at u32_at_up
#define u8_at u8_at_up
#define bytes4 bytes4_up
#define nib4 nib4_up
#define s8x4 s8x4_up
#define dq4 dq4_up
#define dq1 dq1_up
#define q3_scale q3_scale_up
#define k4_scale_min k4_scale_min_up
#define MXFP4_VALUES MXFP4_VALUES_up
#define e8m0_half e8m0_half_up
#define mxfp4_values mxfp4_values_up
#define bytes4_any bytes4_any_up
#define dq32 dq32_up
#define dq4_tail dq4_tail_up
#undef W_BINDING
#define W_BINDING U_BINDING
#include "dequant.glsl"
#undef W_BINDING
#undef W16
#undef W32
#undef w16
#undef w32
#undef wd
#undef f16_at
#undef u32_at
#undef u8_at
#undef bytes4
#undef nib4
#undef s8x4
#undef dq4
#undef dq1
#undef q3_scale
#undef k4_scale_min
#undef MXFP4_VALUES
#undef e8m0_half
#undef mxfp4_values
#undef bytes4_any
#undef dq32
#undef dq4_tail
