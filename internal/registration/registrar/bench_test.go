package registrar_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

func benchRegistrar(b *testing.B) (*registrar.Registrar, *state.Actual) {
	handlers := registration.NewRegistry()
	handlers.Set(testType, registrationtest.NewRecordingHandler())
	actual := state.NewActual()
	reg, err := registrar.New(registrar.Config{Handlers: handlers, Actual: actual})
	if err != nil {
		b.Fatal(err)
	}
	return reg, actual
}

// BenchmarkRegisterOne measures one registration round trip: dial, GetInfo, handler calls,
// Notify(true), close.
func BenchmarkRegisterOne(b *testing.B) {
	reg, actual := benchRegistrar(b)
	dir := registrationtest.SocketDir(b)
	p := registrationtest.Serve(b, filepath.Join(dir, "one.sock"), demoInfo("one"), registrationtest.Options{})
	s := state.Socket{Path: p.Path(), Seen: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		if err := reg.Register(context.Background(), s); err != nil {
			b.Fatal(err)
		}
		actual.Remove(s.Path)
	}
}

// BenchmarkRegisterConcurrent registers n plugins (in-process fake plugin servers, which
// share the CPU with the registrar) all at once, one goroutine each; one op is all n.
func BenchmarkRegisterConcurrent(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			reg, actual := benchRegistrar(b)
			dir := registrationtest.SocketDir(b)
			sockets := make([]state.Socket, n)
			for i := range sockets {
				p := registrationtest.Serve(b, filepath.Join(dir, fmt.Sprint(i, ".sock")), demoInfo(fmt.Sprint("p", i)), registrationtest.Options{})
				sockets[i] = state.Socket{Path: p.Path(), Seen: time.Now()}
			}
			cpu0 := cpuTime()
			for b.Loop() {
				var wg sync.WaitGroup
				var failed sync.Once
				for _, s := range sockets {
					wg.Go(func() {
						if err := reg.Register(context.Background(), s); err != nil {
							failed.Do(func() { b.Error(err) })
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if actual.Len() != n {
					b.Fatalf("%d registered, want %d", actual.Len(), n)
				}
				for _, s := range sockets {
					actual.Remove(s.Path)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the CPU time (user and system) the process used so far: on a shared machine it
// says more than the wall-clock time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRegisterConcurrentRemote is BenchmarkRegisterConcurrent with the plugins served by
// another process, as they are in reality, so that cpu-ms/op is the registrar's cost alone.
func BenchmarkRegisterConcurrentRemote(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			reg, actual := benchRegistrar(b)
			dir := registrationtest.SocketDir(b)
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServePlugins$")
			cmd.Env = append(os.Environ(), "WH_SERVE_DIR="+dir, fmt.Sprint("WH_SERVE_N=", n))
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				b.Fatalf("helper: %q, %v", line, err)
			}
			sockets := make([]state.Socket, n)
			for i := range sockets {
				sockets[i] = state.Socket{Path: filepath.Join(dir, fmt.Sprint(i, ".sock")), Seen: time.Now()}
			}
			cpu0 := cpuTime()
			for b.Loop() {
				var wg sync.WaitGroup
				var failed sync.Once
				for _, s := range sockets {
					wg.Go(func() {
						if err := reg.Register(context.Background(), s); err != nil {
							failed.Do(func() { b.Error(err) })
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if actual.Len() != n {
					b.Fatalf("%d registered, want %d", actual.Len(), n)
				}
				for _, s := range sockets {
					actual.Remove(s.Path)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// TestHelperServePlugins is not a test: BenchmarkRegisterConcurrentRemote runs it in a child
// process to serve WH_SERVE_N fake plugins in WH_SERVE_DIR until killed.
func TestHelperServePlugins(t *testing.T) {
	dir := os.Getenv("WH_SERVE_DIR")
	if dir == "" {
		t.Skip("helper process for BenchmarkRegisterConcurrentRemote")
	}
	n, _ := strconv.Atoi(os.Getenv("WH_SERVE_N"))
	for i := range n {
		registrationtest.Serve(t, filepath.Join(dir, fmt.Sprint(i, ".sock")), demoInfo(fmt.Sprint("p", i)), registrationtest.Options{})
	}
	fmt.Println("ready")
	select {}
}
