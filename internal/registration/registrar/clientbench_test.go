package registrar

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// BenchmarkClient compares the client in client.go with a grpc-go ClientConn doing the same
// work: what one registration asks of a plugin (connect, GetInfo, NotifyRegistrationStatus(true),
// close), for plugins that appear all at once, one goroutine each. The plugins are served by
// another process (TestHelperServePlugins), so cpu-us/reg is the client's CPU alone, per
// registration. One op is a burst of n registrations.
//
//	go test -run '^$' -bench BenchmarkClient -benchtime 20x ./internal/registration/registrar/
func BenchmarkClient(b *testing.B) {
	const n = 200
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
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprint(i, ".sock"))
	}

	for _, c := range []struct {
		name     string
		register func(ctx context.Context, path string) error
	}{
		{"client=wire", registerWire},
		{"client=grpc-go", registerGRPCGo},
	} {
		b.Run(c.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				cpu0 := processCPU()
				var wg sync.WaitGroup
				var failed sync.Once
				for _, p := range paths {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						if err := c.register(ctx, p); err != nil {
							failed.Do(func() { b.Error(err) })
						}
					})
				}
				wg.Wait()
				cpu += processCPU() - cpu0
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-us/reg")
		})
	}
}

func registerWire(ctx context.Context, path string) error {
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	w := newWireConn(c)
	defer w.close()
	raw, err := w.call(ctx, regapi.Registration_GetInfo_FullMethodName, nil)
	if err != nil {
		return err
	}
	if _, err := decodeInfo(path, raw); err != nil {
		return err
	}
	_, err = w.call(ctx, regapi.Registration_NotifyRegistrationStatus_FullMethodName, encodeStatus(true, ""))
	return err
}

func registerGRPCGo(ctx context.Context, path string) error {
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	c := regapi.NewRegistrationClient(cc)
	if _, err := c.GetInfo(ctx, &regapi.InfoRequest{}); err != nil {
		return err
	}
	_, err = c.NotifyRegistrationStatus(ctx, &regapi.RegistrationStatus{PluginRegistered: true})
	return err
}

// processCPU is the CPU time (user and system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
