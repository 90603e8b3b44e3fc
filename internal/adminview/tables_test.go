package adminview

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:               "0s",
		45 * time.Second:           "45s",
		119 * time.Second:          "119s",
		200 * time.Second:          "3m20s",
		45 * time.Minute:           "45m",
		5 * time.Hour:              "5h",
		72 * time.Hour:             "3d",
		47*time.Hour + time.Minute: "47h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := stateName(adminv1.PluginState_PLUGIN_STATE_WAITING_FOR_HANDLER); got != "waiting-for-handler" {
		t.Errorf("stateName = %q", got)
	}
	if got := eventName(adminv1.EventType_EVENT_TYPE_RESET); got != "RESET" {
		t.Errorf("eventName = %q", got)
	}
}

// TestHandlerTableLastErrorWithoutFile: the row names the file, so LAST-ERROR says only what is
// wrong with it (the full text is in -o wide and -o json).
func TestHandlerTableLastErrorWithoutFile(t *testing.T) {
	const file = "/etc/wasmhost/handlers/abi2.wasm"
	h := &adminv1.Handler{File: file, LastError: "host: bad module " + file + ": ABI version 2 not supported (supported: 1)"}
	var out bytes.Buffer
	if err := WriteHandlers(&out, []*adminv1.Handler{h}, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  bad module: ABI version 2 not supported (supported: 1)") {
		t.Errorf("table:\n%s", out.String())
	}
	out.Reset()
	if err := WriteHandlers(&out, []*adminv1.Handler{h}, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), h.LastError) {
		t.Errorf("wide table lost the full error:\n%s", out.String())
	}
}

// TestHandlerTableSaysWhen: LAST-ERROR says how long ago the error was, and a file gone from
// the handler directory says so and that it is removed unless it is back.
func TestHandlerTableSaysWhen(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	refused := &adminv1.Handler{File: "/h/a.wasm", PluginTypes: []string{"x"},
		LastError: "host: bad module /h/a.wasm: plugin type x is already handled by /h/b.wasm", LastErrorAt: timestamppb.New(now.Add(-90 * time.Second))}
	gone := &adminv1.Handler{File: "/h/b.wasm", PluginTypes: []string{"x"}, GoneSince: timestamppb.New(now.Add(-3 * time.Second))}
	var out bytes.Buffer
	if err := WriteHandlers(&out, []*adminv1.Handler{refused, gone}, true, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"90s ago: host: bad module /h/a.wasm: plugin type x is already handled by /h/b.wasm",
		"file gone 3s ago, removed unless back within 10s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	v := NewHandler(refused)
	if v.LastErrorAt == nil || !v.LastErrorAt.Equal(now.Add(-90*time.Second)) || v.GoneSince != nil {
		t.Errorf("json view %+v", v)
	}
}

// TestStatusCountsEveryState: the plugins line of wasmhost status breaks the total down by
// every state the daemon counts (standby and rejected plugins were left out of it), and a
// state this client does not know is shown too, after the known ones.
func TestStatusCountsEveryState(t *testing.T) {
	var buf bytes.Buffer
	WriteStatus(&buf, &adminv1.Status{Version: "v", Ready: true, Plugins: 6, PluginsByState: map[string]uint32{
		"registered": 1, "standby": 1, "rejected": 2, "waiting-for-handler": 1, "quarantined-someday": 1,
	}})
	want := "plugins:  6 (1 registered, 1 standby, 2 rejected, 1 waiting-for-handler, 1 quarantined-someday)"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("status:\n%s\nwant the line %q", buf.String(), want)
	}
}

// columns splits a table line on runs of two or more spaces.
func columns(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}
