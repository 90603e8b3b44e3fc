package daemon

import (
	"os"

	"github.com/wasmhost/wasmhost/internal/capture"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/session"
)

// newCapture is the ring of sessions handlers.capture asks for, or nil when it is off.
func newCapture(cfg config.Config) (*capture.Ring, error) {
	if cfg.Handlers.Capture.Sessions <= 0 {
		return nil, nil
	}
	red, err := session.NewRedactor(cfg.Handlers.Capture.Redact)
	if err != nil {
		return nil, err
	}
	node, _ := os.Hostname()
	return capture.New(capture.Config{
		Sessions: cfg.Handlers.Capture.Sessions,
		OptOut:   cfg.CaptureOptOut(),
		Redactor: red,
		Node:     node,
	}), nil
}
