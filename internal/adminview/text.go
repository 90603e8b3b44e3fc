package adminview

// The text of tables and reports: colours on a terminal, aligned columns, times and
// durations as kubectl shows them, and the one text policy over whole answers.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wasmhost/wasmhost/internal/safetext"
)

// Terminal colours. Every code is five bytes and the reset four, so a column whose cells are
// all coloured stays aligned in text/tabwriter, which counts the codes as text.
const (
	Red     = "\x1b[31m"
	Green   = "\x1b[32m"
	Yellow  = "\x1b[33m"
	grey    = "\x1b[90m"
	noColor = "\x1b[39m"
	Reset   = "\x1b[0m"
)

// UseColor reports whether w is a terminal that wants colour (NO_COLOR is honoured).
func UseColor(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

func stateColor(state string) string {
	switch state {
	case "registered":
		return Green
	case "failing", "rejected":
		return Red
	case "pending", "waiting-for-handler", "standby":
		return Yellow
	case "gone":
		return grey
	default:
		return noColor
	}
}

// Paint wraps s in code when color is on.
func Paint(s, code string, color bool) string {
	if !color {
		return s
	}
	return code + s + Reset
}

// table aligns tab-separated rows into columns two spaces apart, without trailing blanks.
type table struct {
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable() *table {
	t := &table{}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 8, 2, ' ', 0)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) writeTo(w io.Writer) error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	var out strings.Builder
	for line := range strings.Lines(t.buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	_, err := io.WriteString(w, out.String())
	return err
}

func timeOrNil(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

// age is the time since t (or, when t is absent, since alt), kubectl-style.
func age(t, alt *timestamppb.Timestamp, now time.Time) string {
	if t == nil {
		t = alt
	}
	if t == nil {
		return "-"
	}
	return shortDuration(now.Sub(t.AsTime()))
}

// shortDuration renders d the way kubectl renders ages: 45s, 3m20s, 12m, 5h, 3d.
func shortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func ShortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps an error on one table line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// cpuTime shows a CPU or waiting time in a table: "-" for none, else to the millisecond (to
// the microsecond under one millisecond).
func cpuTime(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// SafeMessage escapes, with safetext.Show, every string in m (fields, lists, map keys and
// values, nested messages), in place, for printing as text.
func SafeMessage(m proto.Message) {
	if m == nil {
		return
	}
	safeReflect(m.ProtoReflect())
}

func safeReflect(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString(safetext.Show(l.Get(i).String())))
				} else if fd.Kind() == protoreflect.MessageKind {
					safeReflect(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type kv struct {
				k protoreflect.MapKey
				v protoreflect.Value
			}
			var all []kv
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				all = append(all, kv{k, v})
				return true
			})
			for _, e := range all {
				val := e.v
				if fd.MapValue().Kind() == protoreflect.StringKind {
					val = protoreflect.ValueOfString(safetext.Show(val.String()))
				} else if fd.MapValue().Kind() == protoreflect.MessageKind {
					safeReflect(val.Message())
				}
				key := e.k
				if fd.MapKey().Kind() == protoreflect.StringKind {
					if s := safetext.Show(key.String()); s != key.String() {
						mp.Clear(key)
						key = protoreflect.ValueOfString(s).MapKey()
					}
				}
				mp.Set(key, val)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(safetext.Show(v.String())))
		case fd.Kind() == protoreflect.MessageKind:
			safeReflect(v.Message())
		}
		return true
	})
}
