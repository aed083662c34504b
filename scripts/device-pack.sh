#!/bin/sh
# device-pack.sh: what a lent GPU machine needs to run scripts/gpu-check.sh, packed here.
#
#   scripts/device-pack.sh [DIR]        (DIR: .dev, which .git/info/exclude should list)
#
# A device run carries at most 64 MiB of ignored files, and the machine may lack glslc
# and this project's Debian libraries. So: the binaries gpu-check.sh uses, built here and
# stripped (DIR/bins.tar.xz); the shared libraries they load that are not the C library's
# own (DIR/libs); ../shared without its f32 references, Gemma 3's files and the
# vocabularies but one (DIR/shared: the whole of it is over the limit; the tests skip
# what is missing); the Vulkan loader's package
# (.gl/, unpacked by gpu-check.sh only where the machine has no libvulkan.so.1); and
# DIR/run.sh, the command to give the device tool:
#
#   run(command="sh .dev/run.sh", carry=[".dev", ".gl"], timeout_s=540)
#
# run.sh sets up, runs gpu-check.sh within the time it is given (GPU_CHECK_S, 420 s) and
# leaves the logs in $OUT/logs.tgz.
set -eu
cd "$(dirname "$0")/.."
DIR=${1:-.dev}
BUILD=${BUILD:-build}
SHARED=${SHARED:-../shared}
bins="anyllm test_vulkan test_vkattn test_vkdelta test_hybrid test_ref"
make -j"$(nproc)" BUILD="$BUILD" $(for b in $bins; do printf '%s/%s ' "$BUILD" "$b"; done) >/dev/null
rm -rf "$DIR" && mkdir -p "$DIR/stage" "$DIR/libs" "$DIR/shared"
for b in $bins; do strip -o "$DIR/stage/$b" "$BUILD/$b"; done
tar cJf "$DIR/bins.tar.xz" -C "$DIR/stage" $bins && rm -rf "$DIR/stage"
# every library the binaries load but the C library's own and the Vulkan loader
for b in $bins; do ldd "$BUILD/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libvulkan)\.so' |
    while read -r lib; do cp -L "$lib" "$DIR/libs/"; done
# what the GPU's tests read: the quantized reference models and their logits, and the
# one vocabulary test_ref loads (Gemma 3's model is not carried, so its data stays too)
(cd "$SHARED" && find . -type f ! -name '*-f32.*' ! -path './models/gemma3/*' \
    ! \( -path './vocab/*' ! -name 'ggml-vocab-gpt-2.gguf' \) -print) | while read -r f; do
    mkdir -p "$DIR/shared/$(dirname "$f")" && cp "$SHARED/$f" "$DIR/shared/$f"
done
mkdir -p .gl
if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
    (cd .gl && apt-get download libvulkan1:amd64 >/dev/null 2>&1) ||
        echo "device-pack: could not download libvulkan1 (gpu-check.sh needs the machine's own)"
fi
cat >"$DIR/run.sh" <<'RUN'
#!/bin/sh
# written by scripts/device-pack.sh: set up the carried files, then gpu-check.sh
set -u
d=$(dirname "$0")
mkdir -p build && tar xJf "$d/bins.tar.xz" -C build
export ANYLLM_LIBS=$PWD/$d/libs SHARED=$PWD/$d/shared
nv=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$nv" ] && [ -z "${VK_DRIVER_FILES:-}" ] && export VK_DRIVER_FILES=$nv
timeout "${GPU_CHECK_S:-420}" sh scripts/gpu-check.sh "$@"
rc=$?
[ -n "${OUT:-}" ] && tar czf "$OUT/logs.tgz" build/gpu-check-* 2>/dev/null
exit $rc
RUN
total=$(du -sck "$DIR" .gl | tail -n 1 | cut -f1)
echo "device-pack: $DIR and .gl hold $((total / 1024)) MiB (a run carries 64 MiB at most)"
[ "$total" -le $((64 * 1024)) ]
