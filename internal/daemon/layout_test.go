package daemon

import (
	"errors"
	"go/build"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// The daemon's packages follow the data: socket → watcher → state → reconciler →
// registration → host. A package may import one at its own stage or an earlier one, never a
// later one, so that `go list -deps` of any of them reads as the pipeline up to it. The
// reconciler drives the stages after it through interfaces it declares: none of them imports
// it (what they share with it, the per-type slots, is internal/typeslots).
func TestImportsFollowTheDataFlow(t *testing.T) {
	const module = "github.com/wasmhost/wasmhost/"
	stage := map[string]int{
		"internal/watcher":                0,
		"internal/state":                  1,
		"internal/typeslots":              2,
		"internal/reconciler":             2,
		"internal/registration":           3,
		"internal/registration/registrar": 3,
		"internal/registration/forward":   3,
		"internal/host":                   4,
	}
	// A package under a stage's (internal/host/wasmbin) is at that stage.
	stageOf := func(rel string) (int, bool) {
		best, s := "", 0
		for p, n := range stage {
			if (rel == p || strings.HasPrefix(rel, p+"/")) && len(p) > len(best) {
				best, s = p, n
			}
		}
		return s, best != ""
	}
	// Leaves any stage may use: they import nothing of the pipeline (checked below).
	leaves := []string{"internal/unixsock", "internal/safetext", "internal/session", "internal/limits", "internal/tracing"}
	for _, leaf := range leaves {
		bp, err := build.Import(module+leaf, "", 0)
		if err != nil {
			t.Fatalf("%s: %v", leaf, err)
		}
		for _, imp := range bp.Imports {
			if rel, ok := strings.CutPrefix(imp, module); ok && strings.HasPrefix(rel, "internal/") {
				t.Errorf("%s, a leaf every stage may use, imports %s", leaf, rel)
			}
		}
	}
	pkgs := []string{"internal/host/wasmbin", "internal/host/sandbox", "internal/host/inspect", "internal/host/policy", "internal/registration/liveness"}
	for pkg := range stage {
		pkgs = append(pkgs, pkg)
	}
	for _, pkg := range pkgs {
		own, _ := stageOf(pkg)
		bp, err := build.Import(module+pkg, "", 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range bp.Imports {
			rel, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			s, inPipeline := stageOf(rel)
			if inPipeline && s > own {
				t.Errorf("%s (stage %d) imports %s (stage %d), which sits later in the data flow", pkg, own, rel, s)
			}
			if rel == "internal/reconciler" {
				t.Errorf("%s imports internal/reconciler, which drives it: declare what is shared in a package both import", pkg)
			}
			if strings.HasPrefix(rel, "internal/") && !inPipeline && !slices.Contains(leaves, rel) {
				t.Errorf("%s imports %s, which is not part of the pipeline", pkg, path.Clean(rel))
			}
		}
	}
}

// TestPublishOnlyReadsTheState: the publisher sits beside the pipeline, as the admin API
// does: of the pipeline's packages it imports the state store alone, so that nothing it does
// can reach back into a registration. Beside it, it may use the leaves that hold no state of
// the pipeline: the Kubernetes name rules (k8sname), the text policy (safetext) and the
// tracing's names (tracing).
func TestPublishOnlyReadsTheState(t *testing.T) {
	const module = "github.com/wasmhost/wasmhost/"
	bp, err := build.Import(module+"internal/publish", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range bp.Imports {
		rel, ok := strings.CutPrefix(imp, module)
		if ok && rel != "internal/state" && rel != "internal/k8sname" && rel != "internal/safetext" && rel != "internal/tracing" {
			t.Errorf("internal/publish imports %s; of the pipeline, it may read internal/state only", rel)
		}
	}
}

// TestSandboxBelowTheHost: the host's packages by job (internal/host's doc), in the order a
// call meets them from below: the sandbox (internal/host/sandbox), the report of a module
// described in it (internal/host/inspect, beside the layer: `handler inspect`), the policy
// layer over it (internal/host/policy: what serves a type, revisions, rollback pins, shadows,
// quarantine), the reloader and the Host over them (internal/host). Each links none of those
// after it, and imports the one it is built on: the sandbox reaches the layer only through the
// policy it is given for a call (sandbox.Policy), the layer reaches the reloader only through
// what it is told (policy.Layer.Sync). None of them links the stages before the host: the
// watcher, the state store, the reconciler.
func TestSandboxBelowTheHost(t *testing.T) {
	const module = "github.com/wasmhost/wasmhost/"
	order := []string{"internal/host/sandbox", "internal/host/inspect", "internal/host/policy", "internal/host"}
	builtOn := map[string]string{
		"internal/host/inspect": "internal/host/sandbox",
		"internal/host/policy":  "internal/host/sandbox",
		"internal/host":         "internal/host/policy",
	}
	for i, pkg := range order {
		cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+pkg)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				stderr = ee.Stderr
			}
			t.Fatalf("go list -deps ./%s: %v\n%s", pkg, err, stderr)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, module+pkg) || !slices.Contains(deps, module+"internal/registration") {
			t.Fatalf("go list -deps ./%s lists neither itself nor internal/registration:\n%s", pkg, out)
		}
		for _, dep := range deps {
			rel, _ := strings.CutPrefix(dep, module)
			switch {
			case slices.Contains(order[i+1:], rel):
				t.Errorf("%s depends on %s, which sits over it", pkg, rel)
			case rel == "internal/watcher", rel == "internal/state", rel == "internal/reconciler":
				t.Errorf("%s depends on %s", pkg, rel)
			}
		}
		if below := builtOn[pkg]; below != "" {
			bp, err := build.Import(module+pkg, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(bp.Imports, module+below) {
				t.Errorf("%s does not import %s, the package it is built on: imports %v", pkg, below, bp.Imports)
			}
		}
	}
}

// TestSandboxLinksNoWatcher: what builds a host only to load modules by path (the public
// conformance kit, the harness of `wasmhost handler test`, handler bench's, the host itself) links no file
// watcher: the daemon gives the host its follower of the handler directory (host.Config.
// FollowDir), and registration does not reach back into the state store, which holds the
// watcher's types.
func TestSandboxLinksNoWatcher(t *testing.T) {
	pkgs := []string{"./conformance", "./internal/harness", "./internal/handlerbench", "./internal/host", "./internal/host/inspect", "./internal/host/policy", "./internal/host/sandbox"}
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", strings.Join(pkgs, " "), err, stderr)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/wasmhost/wasmhost/internal/host") {
		t.Fatalf("go list -deps %s does not list internal/host:\n%s", strings.Join(pkgs, " "), out)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/fsnotify/") || dep == "github.com/wasmhost/wasmhost/internal/watcher" ||
			dep == "github.com/wasmhost/wasmhost/internal/state" {
			t.Errorf("%s depend on %s", strings.Join(pkgs, ", "), dep)
		}
	}
}

// TestReadmeLayoutNamesEveryPackage: the README's layout (from "The daemon lives under" to
// "Running beside a kubelet") names every package of the daemon's module under internal/,
// admin/, conformance/ and cmd/, so that a maintainer starting from it finds each.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	const module = "github.com/wasmhost/wasmhost/"
	cmd := exec.CommandContext(t.Context(), "go", "list", "./internal/...", "./admin/...", "./conformance/...", "./cmd/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "The daemon lives under")
	if layout, _, ok2 := strings.Cut(layout, "Running beside a kubelet"); !ok || !ok2 || !strings.Contains(layout, "`internal/daemon/`") {
		t.Fatalf("README.md has no layout section between %q and %q naming internal/daemon", "The daemon lives under", "Running beside a kubelet")
	} else {
		for _, pkg := range strings.Fields(string(out)) {
			rel := strings.TrimPrefix(pkg, module)
			if !strings.Contains(layout, "`"+rel+"`") && !strings.Contains(layout, "`"+rel+"/`") {
				t.Errorf("README.md's layout does not name %s", rel)
			}
		}
	}
}
