// Package policy is the host's policy layer over the sandbox: what serves a plugin type's calls
// (TypeHandler, Serving), and the policies of a handler's revisions and failures that a call
// meets before and after the sandbox runs it: rollback pins, shadow runs and quarantine
// (serve.go reads the call path in order; revisions.go, rollback.go, shadow.go,
// quarantine.go).
//
// It sits between the sandbox (package sandbox, below it: a module loaded, a call of one of
// its exports under its budgets) and the reloader (package host, over it: the handler
// directory followed, its files loaded and installed behind their types' handlers). The
// sandbox reaches this layer only through the policy it is given for a call (sandbox.Policy,
// which Serving implements); the reloader makes a Serving of each module it installs
// (NewServing), swaps it behind the type's handler (TypeHandler), and tells the layer what
// serves after each of its steps (Sync). This package follows no directory and imports no
// file watcher.
//
// This package is part of the wasmhost daemon, not a stable API.
package policy

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// Config is what the layer uses of the host's configuration, with its defaults filled in by
// the host (host.Config: the one place of them).
type Config struct {
	// Registry is where the host registers its handlers: the layer finds a type's handler
	// there (a rollback, a status).
	Registry *registration.Registry
	// Bindings give a plugin type to one handler (host.Config.Bindings): a rollback may not
	// pin a revision that the binding refuses.
	Bindings map[string]Binding
	// Quarantine stops calling a handler that keeps trapping or timing out (not nil).
	Quarantine *limits.Quarantine
	// OnChange, if set, is called after the layer changed what serves (a pin, a shadow).
	OnChange func()
	// PoolSize bounds the shadow runs of a type at once (the candidate's pool).
	PoolSize int
	// Logger receives the layer's logs (not nil).
	Logger *slog.Logger
}

// Layer is the policy layer of one host over its sandbox. Create it with New; it is safe for
// concurrent use.
type Layer struct {
	sb   *sandbox.Sandbox
	cfg  Config
	log  *slog.Logger
	revs *revisions // revisions kept, rollback pins and shadow runs (revisions.go, rollback.go, shadow.go)
}

// New returns the layer over sb for cfg (its defaults filled in).
func New(sb *sandbox.Sandbox, cfg Config) *Layer {
	h := &Layer{sb: sb, cfg: cfg, log: cfg.Logger}
	h.revs = newRevisions(h)
	return h
}

// Binding names the one handler that may serve a plugin type (host.Config.Bindings): a file, a
// module digest, or both (then both must match).
type Binding struct {
	// File is the path of the handler file (in the handler directory). Defaults to "": any
	// file.
	File string
	// Digest is the SHA-256 of the module's bytes, lower-case hex, with or without a
	// "sha256:" prefix. Defaults to "": any module.
	Digest string
}

// Refusal says why a module of file with digest sum may not serve pluginType, or "" (the
// reloader, a rollback, `wasmhost handler inspect`).
func (b Binding) Refusal(pluginType, file, sum string) string {
	if b.File != "" && b.File != file {
		return fmt.Sprintf("plugin type %s is bound to the handler file %s (handlers.types.%s.file)", pluginType, b.File, pluginType)
	}
	if d := strings.TrimPrefix(b.Digest, "sha256:"); d != "" && !strings.EqualFold(d, sum) {
		return fmt.Sprintf("plugin type %s is bound to the module sha256:%s (handlers.types.%s.digest), not sha256:%s", pluginType, d, pluginType, sum)
	}
	return ""
}
