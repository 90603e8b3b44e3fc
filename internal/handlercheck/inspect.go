package handlercheck

import (
	"context"
	"path/filepath"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/safetext"
)

// InspectSpec is what handler inspect looks at: the module file at Path, loaded in the sandbox
// Sandbox (the daemon's, as daemon.SandboxConfig makes it from Config) as a file dropped into
// Config's handler directory would be.
type InspectSpec struct {
	Path     string
	Config   config.Config
	Sandbox  host.Config
	CacheDir string // where compiled modules are kept
	// ConfigFile names the config file Config was read from, for the report; "" for the
	// defaults.
	ConfigFile string
}

// InspectReport is the report of handler inspect, as -o json and -o yaml print it.
type InspectReport struct {
	File          string   `json:"file"`
	Size          int64    `json:"size"`
	SHA256        string   `json:"sha256"`
	ABIVersion    uint32   `json:"abiVersion"`
	Manifest      Manifest `json:"manifest"`
	DescribeError string   `json:"describeError,omitempty"`
	Capabilities  []string `json:"capabilities"`
	Exports       []Export `json:"exports"`
	Imports       []Import `json:"imports"`
	Config        string   `json:"config"`
	Loads         bool     `json:"loads"`
	LoadError     string   `json:"loadError,omitempty"`
	Hints         []string `json:"hints,omitempty"`
}

// Export is one export of a module, with its WebAssembly signature.
type Export struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Signature string `json:"signature"`
}

// Import is one import of a module, with the capability it needs, if any.
type Import struct {
	Module     string `json:"module"`
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Signature  string `json:"signature,omitempty"`
	Capability string `json:"capability,omitempty"`
}

// Manifest is what a module declares of itself, shown as the daemon's views show it: names and
// versions are the guest's text, escaped (terminal escapes and all) by the one text policy.
type Manifest struct {
	PluginTypes []string `json:"pluginTypes"`
	Name        string   `json:"name"`
	Version     string   `json:"version"`
}

func newManifest(mf abi.Manifest) Manifest {
	types := make([]string, len(mf.PluginTypes))
	for i, t := range mf.PluginTypes {
		types[i] = safetext.Show(t)
	}
	return Manifest{PluginTypes: types, Name: safetext.Show(mf.Name), Version: safetext.Show(mf.Version)}
}

// Inspect describes the module and says whether the daemon would load it, and if not, why,
// with hints. Its error is for a file it cannot read or describe; a module the daemon would
// refuse is a report with Loads false.
func Inspect(ctx context.Context, spec InspectSpec) (*InspectReport, error) {
	path := spec.Path
	bin, err := ReadModule(path)
	if err != nil {
		return nil, err
	}
	hcfg := spec.Sandbox
	hcfg.HandlerDir, hcfg.CacheDir, hcfg.PoolSize = filepath.Dir(path), spec.CacheDir, 1
	hcfg.PluginCaller = registrar.PluginCaller{} // never called: nothing is registered
	h, err := host.New(ctx, hcfg)
	if err != nil {
		return nil, err
	}
	defer h.Close(context.WithoutCancel(ctx))
	rep, err := h.Inspect(ctx, path, bin)
	if err != nil {
		return nil, notWasm(path, bin, err)
	}
	v := &InspectReport{
		File: path, Size: rep.Size, SHA256: rep.SHA256, ABIVersion: rep.ABIVersion,
		Manifest:      newManifest(rep.Manifest),
		DescribeError: rep.DescribeError,
		Capabilities:  rep.Capabilities,
		Exports:       []Export{},
		Imports:       []Import{},
		Config:        spec.ConfigFile,
	}
	for _, e := range rep.Exports {
		v.Exports = append(v.Exports, Export(e))
	}
	for _, imp := range rep.Imports {
		v.Imports = append(v.Imports, Import(imp))
	}
	if v.Capabilities == nil {
		v.Capabilities = []string{}
	}
	if v.Config == "" {
		v.Config = "(defaults: no capability granted)"
	}
	m, err := h.LoadFile(ctx, path)
	if err != nil {
		v.LoadError = err.Error()
		v.Hints = LoadHints(err, path, rep.Manifest.PluginTypes, rep.Capabilities)
		return v, nil
	}
	v.Loads = true
	_ = m.Close(ctx)
	// A plugin type the config binds to another file or module (handlers.types.<T>.file,
	// .digest) would not be served by it, dropped into the handler directory.
	cfg := spec.Config
	for _, t := range rep.Manifest.PluginTypes {
		tc := cfg.Handlers.Types[t]
		b := policy.Binding{Digest: tc.Digest}
		if tc.File != "" {
			b.File = filepath.Join(cfg.HandlerDir, tc.File)
		}
		if why := b.Refusal(t, filepath.Join(cfg.HandlerDir, filepath.Base(path)), rep.SHA256); why != "" {
			v.Loads, v.LoadError = false, why
			break
		}
	}
	return v, nil
}
