#!/bin/sh
# The sources compile with clang as well as with gcc: every C file, with the Makefile's
# warnings as errors (-fsyntax-only: clang's diagnostics, no second build). Kept because
# clang 14 once refused src/cpu/cpu.c (__builtin_cpu_supports("f16c")).
. "$(dirname "$0")/lib.sh"
CLANG=${CLANG:-clang}
if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "skip: $CLANG not found (.ci/run installs it)"
    echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
flags="-fsyntax-only -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
       -Werror -Iinclude -Isrc -Itests -Itools -pthread -D_GNU_SOURCE"
vk="-DAL_HAVE_VULKAN -I$BUILD/vulkan"
# check NAME FLAGS FILE...: one result for a group of files, naming those that fail
check() {
    name=$1; extra=$2; shift 2
    failed=""
    for f in "$@"; do
        # shellcheck disable=SC2086
        "$CLANG" $flags $extra "$f" >"$tmp/log" 2>&1 || { failed="$failed $f"; head -5 "$tmp/log"; }
    done
    if [ -z "$failed" ]; then ok "clang: $name ($# files)"; else bad "clang: $name:$failed"; fi
}
check "src" "" src/*.c src/format/*.c src/text/*.c src/model/*.c
check "src/cpu" "" src/cpu/*.c
check "src/server" "" src/server/*.c
check "tools" "$vk" tools/*.c
check "tests" "$vk" tests/test_*.c
# Tools use the public API only (STYLE.md): each file of tools/ compiles with include/ and
# tools/ alone, but for the files listed, which still reach into src/ (to shrink).
internal=""
public=""
for f in tools/*.c; do
    case " $internal " in *" $f "*) ;; *) public="$public $f" ;; esac
done
all_flags=$flags
flags=$(echo "$flags" | sed 's/ -Isrc / /; s/ -Itests / /')
# shellcheck disable=SC2086
check "tools on the public API alone" "-DAL_HAVE_VULKAN" $public
flags=$all_flags
skipped=0
if [ -f "$BUILD/vulkan/vk_spirv.h" ]; then check "src/vulkan" "$vk" src/vulkan/*.c
else
    echo "skip: src/vulkan: $BUILD/vulkan/vk_spirv.h not built (no glslc or Vulkan headers)"
    skipped=1
fi
echo "$pass passed, $fail failed, $skipped skipped"
[ $fail -eq 0 ]
