package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/watcher"
)

// handlerDir copies testdata modules into a new private directory, as a handler directory
// must be (only the daemon's user may change what it loads).
func handlerDir(names ...string) string {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			panic(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			panic(err)
		}
	}
	return dir
}

// A module is validated when it loads; a module that breaks the ABI is refused with the
// reason.
func ExampleHost_LoadFile() {
	dir := handlerDir("ok.wasm", "abi2.wasm")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{})
	if err != nil {
		panic(err)
	}
	defer h.Close(ctx)

	m, err := h.LoadFile(ctx, filepath.Join(dir, "ok.wasm"))
	if err != nil {
		panic(err)
	}
	fmt.Println(m.PluginTypes(), m.ABIVersion())
	err = m.ValidatePlugin(ctx, registration.PluginInfo{Type: "ok.example", Name: "p"})
	fmt.Println("validate:", err)

	_, err = h.LoadFile(ctx, filepath.Join(dir, "abi2.wasm"))
	fmt.Println(errors.Is(err, sandbox.ErrBadModule))
	fmt.Println(err.Error()[len("host: bad module ")+len(dir):])
	// Output:
	// [ok.example] 1
	// validate: <nil>
	// true
	// /abi2.wasm: ABI version 2 not supported (supported: 1)
}

// Run serves the modules of a directory through the registry, one handler per plugin type,
// and follows the directory's changes, on the follower it is given, until its context is done.
func ExampleHost_Run() {
	dir := handlerDir("ok.wasm", "kv.wasm")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	reg := registration.NewRegistry()
	follow := func(dir string, resync, retry time.Duration) (host.DirFollower, error) {
		f, err := watcher.FollowDir(dir, resync, retry)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	h, err := host.New(ctx, host.Config{HandlerDir: dir, Registry: reg, FollowDir: follow})
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- h.Run(ctx) }()
	<-h.Ready()
	fmt.Println(reg.Types())
	for _, s := range h.Handlers() {
		fmt.Println(filepath.Base(s.File), s.Serving, s.PluginTypes)
	}
	cancel()
	fmt.Println("run:", <-done)
	fmt.Println("close:", h.Close(context.Background()))
	// Output:
	// [kv.example ok.example]
	// kv.wasm true [kv.example]
	// ok.wasm true [ok.example]
	// run: <nil>
	// close: <nil>
}
