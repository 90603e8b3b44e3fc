module github.com/wasmhost/wasmhost/abi

go 1.24
