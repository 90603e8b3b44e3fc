package abi

// ValueType is a WebAssembly value type, numbered as in the binary format (and in wazero's
// api.ValueType).
type ValueType byte

// I32 is the only value type ABI v1 uses: lengths, pointers into linear memory, statuses and
// codes are all i32.
const I32 ValueType = 0x7f

// Signature is the WebAssembly type of an exported or imported function.
type Signature struct {
	Params  []ValueType
	Results []ValueType
}

func i32s(n int) []ValueType {
	if n == 0 {
		return nil
	}
	s := make([]ValueType, n)
	for i := range s {
		s[i] = I32
	}
	return s
}

// ExportSignatures is the signature of every function export, required or optional. The host
// refuses a module whose export has another signature.
var ExportSignatures = map[string]Signature{
	ExportInitialize: {},
	ExportABIVersion: {Results: i32s(1)},
	ExportManifest:   {Results: i32s(1)},
	ExportValidate:   {Params: i32s(1), Results: i32s(1)},
	ExportRegister:   {Params: i32s(1), Results: i32s(1)},
	ExportDeregister: {Params: i32s(1), Results: i32s(1)},
}

// RequiredExports are the function exports every handler module must have (ExportMemory, a
// memory, is required too).
var RequiredExports = []string{
	ExportABIVersion, ExportManifest, ExportValidate, ExportRegister, ExportDeregister,
}

// ImportSignatures is the signature of every host function in ImportModule. A module that
// imports a name not listed here, or with another signature, is refused.
var ImportSignatures = map[string]Signature{
	ImportRequestRead:     {Params: i32s(2), Results: i32s(1)},
	ImportResultSet:       {Params: i32s(2), Results: i32s(1)},
	ImportLog:             {Params: i32s(3)},
	ImportPublish:         {Params: i32s(4), Results: i32s(1)},
	ImportKVGet:           {Params: i32s(4), Results: i32s(1)},
	ImportKVSet:           {Params: i32s(4), Results: i32s(1)},
	ImportKVDelete:        {Params: i32s(2), Results: i32s(1)},
	ImportKVCompareAndSet: {Params: i32s(6), Results: i32s(1)},
	ImportPluginCall:      {Params: i32s(6), Results: i32s(1)},
	ImportErrorRead:       {Params: i32s(2), Results: i32s(1)},
}
