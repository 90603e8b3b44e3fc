package abitest

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// abiModule is the contract module's path and its directory in this repository.
const (
	abiModule = "github.com/wasmhost/wasmhost/abi"
	abiDir    = "../../abi"
)

// goIn runs the go command in the contract module's directory, with extra environment.
func goIn(t *testing.T, env []string, args ...string) []byte {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	cmd := exec.CommandContext(t.Context(), gobin, args...)
	cmd.Dir = abiDir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), abiDir, err, stderr)
	}
	return out
}

// The contract module depends on nothing outside the standard library, for the handler's
// build (wasip1) and natively, its tests included: a handler's go.mod needs it alone. And its
// go.mod says so, and asks for the Go version abi/README.md names.
func TestContractModuleDependsOnStdlibOnly(t *testing.T) {
	for _, env := range [][]string{nil, {"GOOS=wasip1", "GOARCH=wasm"}} {
		out := goIn(t, env, "list", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}{{end}}", "./...")
		var outside []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, mod, _ := strings.Cut(line, "\t")
			if mod != abiModule {
				outside = append(outside, pkg+" (module "+mod+")")
			}
		}
		if len(outside) > 0 {
			t.Errorf("go list -deps -test ./... in abi/ (%s) lists packages outside the standard library and the contract module:\n%s",
				strings.Join(env, " "), strings.Join(outside, "\n"))
		}
	}

	var mod struct {
		Module  struct{ Path string }
		Go      string
		Require []struct{ Path string }
		Replace []struct{ Old struct{ Path string } }
	}
	if err := json.Unmarshal(goIn(t, nil, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Module.Path != abiModule || len(mod.Require) != 0 || len(mod.Replace) != 0 {
		t.Errorf("abi/go.mod: module %s, %d requires, %d replaces; want module %s, none", mod.Module.Path, len(mod.Require), len(mod.Replace), abiModule)
	}
	readme, err := os.ReadFile(abiDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "`go " + mod.Go + "`"; !strings.Contains(string(readme), want) {
		t.Errorf("abi/go.mod says go %s; abi/README.md does not say %s", mod.Go, want)
	}
}
