package sandbox

import (
	"errors"
	"fmt"

	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
)

// instrument is wasmbin.Instrument with the host's call-stack bound, its failures
// refusals of file.
func (sb *Sandbox) instrument(file string, bin []byte) ([]byte, error) {
	guarded, err := wasmbin.Instrument(bin, uint64(sb.cfg.Limits.MaxCallStack))
	switch {
	case errors.Is(err, wasmbin.ErrReservedExport) || errors.Is(err, wasmbin.ErrReservedImport):
		return nil, refuse(file, RefusedABI, nil, "%v", err)
	case err != nil:
		return nil, refuse(file, RefusedInvalid, nil, "module not valid WebAssembly: %v", err)
	}
	return guarded, nil
}

// callStackFault is a trap of the call stack's bound.
type callStackFault struct {
	limit int64
	err   error // wazero's, with the guest's stack
}

func (f *callStackFault) Error() string {
	return fmt.Sprintf("call stack over %d bytes (handlers.limits.maxCallStack): %v", f.limit, f.err)
}

// callStackOver reports whether the instance's last call trapped on the call stack's bound.
func (in *instance) callStackOver(limit int64) bool {
	if in.mod == nil || limit <= 0 {
		return false
	}
	g := in.mod.ExportedGlobal(wasmbin.CallStackExport)
	return g != nil && int64(uint32(g.Get())) > limit
}
