// Package abitest tests the contract module (github.com/wasmhost/wasmhost/abi) from the
// daemon's module, where the tests may use what the contract module must not depend on: the
// protobuf reference encoder that the codec is checked against byte for byte, and a wazero
// host (package fakehost) that runs the specification's WAT examples and modules built with
// the guest SDK.
package abitest

// abiTestdata holds the specification's WAT examples and their committed .wasm.
const abiTestdata = "../../abi/testdata"
