#!/bin/sh
# Regenerates the .wasm next to each .wat in this directory with wat2wasm (Debian package wabt).
# The .wasm files are committed so that the tests need no wabt.
set -eu
cd "$(dirname "$0")"
for wat in *.wat; do
	wat2wasm "$wat" -o "${wat%.wat}.wasm"
done
