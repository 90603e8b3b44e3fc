package forward_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/internal/registration/forward"
	"github.com/wasmhost/wasmhost/internal/registration/forward/forwardtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// BenchmarkForward: one plugin presented to a fake kubelet that answers the moment its
// socket appears (fsnotify), from Open to Await's return: what forwarding adds to a
// registration besides the kubelet's own once-a-second look at its directory (which a real
// kubelet adds: 0–1 s).
func BenchmarkForward(b *testing.B) {
	e := newBenchEnv(b)
	f := e.forwarder(b)
	p := plugin("csi.example.com")
	for b.Loop() {
		if err := f.Open(p); err != nil {
			b.Fatal(err)
		}
		if err := f.Await(b.Context(), p.Socket); err != nil {
			b.Fatal(err)
		}
		f.Remove(p.Socket)
	}
}

// BenchmarkRemoveToDeregister: from Remove (a plugin gone from wasmhost) to the fake
// kubelet's DeRegister, which it does on the socket's removal (fsnotify): the kubelet's own
// reconciler adds up to a second to it.
func BenchmarkRemoveToDeregister(b *testing.B) {
	e := newBenchEnv(b)
	f := e.forwarder(b)
	p := plugin("csi.example.com")
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := f.Open(p); err != nil {
			b.Fatal(err)
		}
		if err := f.Await(b.Context(), p.Socket); err != nil {
			b.Fatal(err)
		}
		from := len(e.kubelet.Events())
		b.StartTimer()
		start := time.Now()
		f.Remove(p.Socket)
		ev, _ := e.kubelet.Wait(b, from, forwardtest.Deregistered, p.Name, time.Minute)
		total += ev.At.Sub(start)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/deregister")
}

// BenchmarkThousandForwarded: the cost of 1,000 plugins presented to the kubelet (sockets
// served, none answered yet): goroutines and heap, with one gRPC server for every socket (the
// forwarder), and, for comparison, with one gRPC server per socket.
func BenchmarkThousandForwarded(b *testing.B) {
	const n = 1000
	b.Run("forwarder", func(b *testing.B) {
		for b.Loop() {
			e := newBenchEnv(b)
			g0, h0 := usage()
			f, err := forward.New(forward.Config{Dir: e.dir, RecordDir: e.records, Types: []string{"CSIPlugin"}})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := f.Open(plugin(fmt.Sprintf("p%04d.example.com", i))); err != nil {
					b.Fatal(err)
				}
			}
			g1, h1 := usage()
			b.ReportMetric(float64(g1-g0)/n, "goroutines/plugin")
			b.ReportMetric(float64(h1-h0)/n, "heapB/plugin")
			f.Close()
		}
	})
	b.Run("server-per-socket", func(b *testing.B) {
		for b.Loop() {
			e := newBenchEnv(b)
			g0, h0 := usage()
			var srvs []*grpc.Server
			for i := range n {
				l, err := net.Listen("unix", filepath.Join(e.dir, fmt.Sprintf("s%04d.sock", i)))
				if err != nil {
					b.Fatal(err)
				}
				s := grpc.NewServer()
				regapi.RegisterRegistrationServer(s, regapi.UnimplementedRegistrationServer{})
				go s.Serve(l)
				srvs = append(srvs, s)
			}
			g1, h1 := usage()
			b.ReportMetric(float64(g1-g0)/n, "goroutines/plugin")
			b.ReportMetric(float64(h1-h0)/n, "heapB/plugin")
			for _, s := range srvs {
				s.Stop()
			}
		}
	})
}

func usage() (goroutines int, heap uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapInuse + m.StackInuse
}

type benchEnv struct {
	dir, records string
	kubelet      *forwardtest.Kubelet
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	root, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	e := &benchEnv{dir: filepath.Join(root, "k"), records: filepath.Join(root, "r")}
	if err := os.Mkdir(e.dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return e
}

func (e *benchEnv) forwarder(b *testing.B) *forward.Forwarder {
	b.Helper()
	e.kubelet = forwardtest.Start(b, e.dir)
	f, err := forward.New(forward.Config{Dir: e.dir, Types: []string{"CSIPlugin"}, RecordDir: e.records, Status: state.New()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.Close)
	return f
}

// BenchmarkOpenRemove: making a plugin's socket (bound, recorded, renamed into place, served)
// and removing it, without a kubelet.
func BenchmarkOpenRemove(b *testing.B) {
	e := newBenchEnv(b)
	f, err := forward.New(forward.Config{Dir: e.dir, Types: []string{"CSIPlugin"}, RecordDir: e.records})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.Close)
	p := plugin("csi.example.com")
	for b.Loop() {
		if err := f.Open(p); err != nil {
			b.Fatal(err)
		}
		f.Remove(p.Socket)
	}
}
