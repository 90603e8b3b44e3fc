#!/bin/sh
# Regenerates the .wasm fixtures from their .wat sources (needs wat2wasm, Debian package
# wabt). The .wasm files are committed, so the tests do not need wabt.
set -eu
cd "$(dirname "$0")"
for wat in *.wat; do
	wat2wasm -o "${wat%.wat}.wasm" "$wat"
done
# Not WebAssembly at all, and a valid module cut in half.
printf 'this is not a wasm module\n' > notwasm.wasm
head -c "$(($(wc -c < ok.wasm) / 2))" ok.wasm > truncated.wasm
