#!/bin/sh
# The reference-logit criteria of test_ref with the fast kernels (8-bit activations on
# the best instruction set this CPU has) instead of the default reference ops.
ANYLLM_ISA=best exec "${BUILD:-build}/test_ref"
