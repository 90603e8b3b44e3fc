package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestJSONLogWritesDurationsAsText(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("loaded", "took", 1500*time.Microsecond, "count", 3)
	if out := buf.String(); !strings.Contains(out, `"took":"1.5ms"`) || !strings.Contains(out, `"count":3`) {
		t.Errorf("log line %s", out)
	}
}

func TestLoggerRefusesBadSettings(t *testing.T) {
	if _, err := newLogger(&bytes.Buffer{}, "xml", "info"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("format xml: %v", err)
	}
	if _, err := newLogger(&bytes.Buffer{}, "json", "loud"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("level loud: %v", err)
	}
}
