// Package session is the format of a captured registration: what a handler saw and did when a
// plugin registered (the plugin's GetInfo answer, each handler call with its host-call
// exchanges, what it saw of the key-value store, and its result). The daemon captures sessions
// (`wasmhost plugins capture`), `wasmhost handler test --record` writes them, and `handler
// test --replay` runs a module against one. The YAML form is documented in docs/sessions.md;
// it is versioned by its apiVersion and kind, as the config file is.
//
// It depends on nothing of the daemon's, so that the host can record into its types.
package session

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"go.yaml.in/yaml/v3"
)

// The header of a session file.
const (
	APIVersion = "wasmhost.dev/session/v1"
	Kind       = "Session"
)

// Session is one plugin's registration as its handler saw it.
type Session struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// CapturedAt is when the first call of the session started.
	CapturedAt time.Time `yaml:"capturedAt"`
	// Source says where the session comes from: "daemon" (captured on a node; Node names it) or
	// "handler test" (recorded by the tool).
	Source string `yaml:"source,omitempty"`
	Node   string `yaml:"node,omitempty"`
	// Plugin is what the plugin answered to GetInfo, and where it registered from.
	Plugin Plugin `yaml:"plugin"`
	// Handler is the module that served the calls.
	Handler Handler `yaml:"handler"`
	// Redacted counts the spans of bytes the redaction rules replaced (handlers.capture.redact).
	Redacted int `yaml:"redacted,omitempty"`
	// Truncated, when set, is what the calls' recordings left out together (each call's
	// Truncated says which): the session is incomplete, and a replay refuses it (Replayable).
	Truncated *Truncated `yaml:"truncated,omitempty"`
	// Calls are the handler calls, in order: validate, then register (and deregister).
	Calls []Call `yaml:"calls"`
}

// Plugin is a plugin's registration info.
type Plugin struct {
	Socket   string   `yaml:"socket"`
	Type     string   `yaml:"type"`
	Name     string   `yaml:"name"`
	Endpoint string   `yaml:"endpoint,omitempty"`
	Versions []string `yaml:"versions,omitempty"`
}

// Handler names a handler module.
type Handler struct {
	File   string `yaml:"file,omitempty"`
	SHA256 string `yaml:"sha256,omitempty"`
}

// The handler exports a call may be of.
const (
	Validate   = "validate"
	Register   = "register"
	Deregister = "deregister"
)

// Call is one call of a handler export.
type Call struct {
	// Export is validate, register or deregister.
	Export string `yaml:"export"`
	// StoreBefore is what the call saw of the plugin type's key-value store: each key it
	// touched (read, wrote, deleted), with its value before the call first touched it; a key
	// absent then is absent here.
	StoreBefore map[string]Bytes `yaml:"storeBefore,omitempty"`
	// Exchanges are the host calls that reached outside the guest, in order.
	Exchanges []Exchange `yaml:"exchanges,omitempty"`
	// Result is how the call ended.
	Result Result `yaml:"result"`
	// Duration is how long the call took.
	Duration time.Duration `yaml:"duration,omitempty"`
	// Truncated, when set, says that the recording stopped at a bound (the capture's, or the
	// sandbox's per call) and what it left out: Exchanges holds only those before it, and
	// StoreBefore only the keys touched before it. The call itself ran on untouched: Result
	// is how it really ended.
	Truncated *Truncated `yaml:"truncated,omitempty"`
}

// Truncated is what a recording left out past its bounds.
type Truncated struct {
	// Exchanges is how many host calls were not recorded.
	Exchanges int `yaml:"exchanges"`
	// Bytes is what they (and the store values not recorded with them) would have taken, as
	// Exchange.Size and StoreEntrySize count.
	Bytes int64 `yaml:"bytes"`
}

// Add returns a new Truncated of t's counts (none when t is nil) plus n exchanges and b bytes:
// t itself is never changed, so that a copy of a session may share it.
func (t *Truncated) Add(n int, b int64) *Truncated {
	sum := Truncated{Exchanges: n, Bytes: b}
	if t != nil {
		sum.Exchanges += t.Exchanges
		sum.Bytes += t.Bytes
	}
	return &sum
}

// ErrTruncated is the error of a session whose recording stopped at a bound.
var ErrTruncated = errors.New("session: truncated")

// Replayable returns nil for a complete session, or an error matching ErrTruncated that names
// the first truncated call: a replay would answer the module from an incomplete recording
// (plugin_call answers and store values missing) and report departures that are not there.
func (s *Session) Replayable() error {
	for i, c := range s.Calls {
		if c.Truncated != nil {
			return fmt.Errorf("%w: calls[%d] (%s) was recorded only up to the capture's bounds, and %d host calls (%d bytes) after them were left out; "+
				"a replay would report departures that are not there (docs/sessions.md, \"Bounds\")",
				ErrTruncated, i, c.Export, c.Truncated.Exchanges, c.Truncated.Bytes)
		}
	}
	if s.Truncated != nil {
		return fmt.Errorf("%w: %d host calls (%d bytes) were left out (docs/sessions.md, \"Bounds\")", ErrTruncated, s.Truncated.Exchanges, s.Truncated.Bytes)
	}
	return nil
}

// What one kept exchange or store entry costs besides its bytes: the struct and the slice
// and string headers it holds, so that many empty exchanges count too.
const (
	ExchangeOverhead   = int64(unsafe.Sizeof(Exchange{}))
	StoreEntryOverhead = 64 // a map entry's key and value headers, and its share of the buckets
)

// Size is what x takes in a recording, in bytes: its key, method, payloads and error, and
// ExchangeOverhead.
func (x *Exchange) Size() int64 {
	return ExchangeOverhead + int64(len(x.Fn)+len(x.Method)+len(x.Key)+len(x.Request)+len(x.Response)+len(x.Old)+len(x.Value)+len(x.Error))
}

// StoreEntrySize is what a StoreBefore entry takes, in bytes.
func StoreEntrySize(key string, value []byte) int64 {
	return StoreEntryOverhead + int64(len(key)+len(value))
}

// Size is what c takes in a recording, in bytes: its exchanges, its store entries and its
// result (the reason and what it published).
func (c *Call) Size() int64 {
	n := int64(len(c.Export) + len(c.Result.Status) + len(c.Result.Reason))
	for i := range c.Exchanges {
		n += c.Exchanges[i].Size()
	}
	for k, v := range c.StoreBefore {
		n += StoreEntrySize(k, v)
	}
	for k, v := range c.Result.Published {
		n += StoreEntryOverhead + int64(len(k)+len(v))
	}
	return n
}

// The host functions an Exchange may be of.
const (
	PluginCall = "plugin_call"
	KVGet      = "kv_get"
	KVSet      = "kv_set"
	KVDelete   = "kv_delete"
	KVCAS      = "kv_compare_and_set"
)

// Exchange is one host call and its answer.
type Exchange struct {
	// Fn is the host function: plugin_call, kv_get, kv_set, kv_delete, kv_compare_and_set.
	Fn string `yaml:"fn"`
	// Method is plugin_call's gRPC method, "/csi.v1.Node/NodeGetInfo".
	Method string `yaml:"method,omitempty"`
	// Key is a kv_* call's key.
	Key string `yaml:"key,omitempty"`
	// Request is plugin_call's encoded request.
	Request Bytes `yaml:"request,omitempty"`
	// Response is plugin_call's encoded response.
	Response Bytes `yaml:"response,omitempty"`
	// Old is kv_compare_and_set's expected value (OldAbsent: the key must not exist).
	Old       Bytes `yaml:"old,omitempty"`
	OldAbsent bool  `yaml:"oldAbsent,omitempty"`
	// Value is what kv_get read, or what kv_set and kv_compare_and_set wrote (Delete: the CAS
	// deletes the key).
	Value  Bytes `yaml:"value,omitempty"`
	Delete bool  `yaml:"delete,omitempty"`
	// Code is the host function's status code: 0 (or a length) for success, else an ABI error
	// code (-1 not found, -2 denied, ...).
	Code int32 `yaml:"code"`
	// Error is what error_read said after a failure (plugin_call's gRPC error).
	Error string `yaml:"error,omitempty"`
}

// Result is how a handler call ended.
type Result struct {
	// Status is ok, rejected or error.
	Status string `yaml:"status"`
	// Reason is a rejection's reason, or the error of a failed call.
	Reason string `yaml:"reason,omitempty"`
	// Published is what a successful register published.
	Published map[string]string `yaml:"published,omitempty"`
}

// The statuses of a Result.
const (
	StatusOK       = "ok"
	StatusRejected = "rejected"
	StatusError    = "error"
)

// Bytes is a value of bytes: in YAML a plain string when it is printable UTF-8, else a
// !!binary scalar (base64), which every YAML reader decodes.
type Bytes []byte

// MarshalYAML implements yaml.Marshaler.
func (b Bytes) MarshalYAML() (any, error) {
	if printableText(b) {
		return string(b), nil
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!binary", Value: base64.StdEncoding.EncodeToString(b)}, nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a string or !!binary, got a %s", n.Line, kindName(n.Kind))
	}
	if n.Tag == "!!binary" {
		v, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), ""))
		if err != nil {
			return fmt.Errorf("line %d: !!binary: %w", n.Line, err)
		}
		*b = v
		return nil
	}
	*b = Bytes(n.Value)
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	}
	return "node"
}

// printableText: valid UTF-8 without control characters other than newline and tab, and
// neither starting nor ending with space (a YAML scalar keeps those only quoted; they would
// read back, but a binary form is plainer for bytes that are not text).
func printableText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r != '\n' && r != '\t' && !unicode.IsPrint(r) && r != ' ' {
			return false
		}
	}
	return true
}

// Marshal returns the session in YAML.
func Marshal(s *Session) ([]byte, error) {
	if s.APIVersion == "" {
		s.APIVersion = APIVersion
	}
	if s.Kind == "" {
		s.Kind = Kind
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Unmarshal reads a session in YAML: unknown keys and a header other than this version's are
// errors.
func Unmarshal(b []byte) (*Session, error) {
	var s Session
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty session")
		}
		return nil, err
	}
	if s.APIVersion != APIVersion || s.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q kind %q: want apiVersion %s and kind %s", s.APIVersion, s.Kind, APIVersion, Kind)
	}
	if s.Plugin.Type == "" || s.Plugin.Name == "" {
		return nil, errors.New("plugin.type and plugin.name must be set")
	}
	if t := s.Truncated; t != nil && (t.Exchanges < 0 || t.Bytes < 0) {
		return nil, errors.New("truncated: counts must not be negative")
	}
	for i, c := range s.Calls {
		if t := c.Truncated; t != nil && (t.Exchanges < 0 || t.Bytes < 0) {
			return nil, fmt.Errorf("calls[%d].truncated: counts must not be negative", i)
		}
		switch c.Export {
		case Validate, Register, Deregister:
		default:
			return nil, fmt.Errorf("calls[%d].export: want validate, register or deregister, got %q", i, c.Export)
		}
		switch c.Result.Status {
		case StatusOK, StatusRejected, StatusError:
		default:
			return nil, fmt.Errorf("calls[%d].result.status: want ok, rejected or error, got %q", i, c.Result.Status)
		}
		for j, x := range c.Exchanges {
			switch x.Fn {
			case PluginCall, KVGet, KVSet, KVDelete, KVCAS:
			default:
				return nil, fmt.Errorf("calls[%d].exchanges[%d].fn: unknown host function %q", i, j, x.Fn)
			}
		}
	}
	return &s, nil
}

// Load reads the session file at path; its errors name the file.
func Load(path string) (*Session, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	s, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", path, err)
	}
	return s, nil
}

// LoadReplayable reads the session file at path for a replay (`handler test --replay`,
// `handler diff`, `handler bench --replay`): a session that is not complete (Replayable) is
// refused, with an error that names the file and matches ErrTruncated.
func LoadReplayable(path string) (*Session, error) {
	s, err := Load(path)
	if err != nil {
		return nil, err
	}
	if err := s.Replayable(); err != nil {
		return nil, fmt.Errorf("session %s: %w", path, err)
	}
	return s, nil
}

// Save writes s to path (mode 0600: a session holds what plugins answered).
func Save(path string, s *Session) error {
	b, err := Marshal(s)
	if err != nil {
		return fmt.Errorf("session %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	return nil
}

// Redactor replaces, in what a session keeps, every match of its rules by as many '*' bytes:
// lengths stay, so that an encoded protobuf message still decodes.
type Redactor struct {
	rules []*regexp.Regexp
}

// DefaultRedactRules are the rules of handlers.capture.redact by default: PEM private keys,
// JSON Web Tokens, and a bearer token.
var DefaultRedactRules = []string{
	`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`,
	`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+`,
	`(?i)bearer [A-Za-z0-9._~+/-]{8,}=*`,
}

// NewRedactor compiles rules (RE2 regular expressions, matched against bytes).
func NewRedactor(rules []string) (*Redactor, error) {
	r := &Redactor{}
	for _, s := range rules {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("redaction rule %q: %w", s, err)
		}
		r.rules = append(r.rules, re)
	}
	return r, nil
}

// bytes redacts b in place and returns how many spans it replaced.
func (r *Redactor) bytes(b []byte) int {
	n := 0
	for _, re := range r.rules {
		for _, loc := range re.FindAllIndex(b, -1) {
			for i := loc[0]; i < loc[1]; i++ {
				b[i] = '*'
			}
			n++
		}
	}
	return n
}

func (r *Redactor) str(s *string) int {
	b := []byte(*s)
	n := r.bytes(b)
	if n > 0 {
		*s = string(b)
	}
	return n
}

// Redact applies the rules to every value s keeps (what plugins answered, the store, requests,
// reasons, published values) and adds the spans replaced to s.Redacted. Keys and method names
// are kept.
func (r *Redactor) Redact(s *Session) {
	if r == nil || len(r.rules) == 0 {
		return
	}
	n := 0
	for i := range s.Calls {
		c := &s.Calls[i]
		for _, v := range c.StoreBefore {
			n += r.bytes(v)
		}
		for j := range c.Exchanges {
			x := &c.Exchanges[j]
			n += r.bytes(x.Request) + r.bytes(x.Response) + r.bytes(x.Old) + r.bytes(x.Value) + r.str(&x.Error)
		}
		n += r.str(&c.Result.Reason)
		for k, v := range c.Result.Published {
			if m := r.str(&v); m > 0 {
				n += m
				c.Result.Published[k] = v
			}
		}
	}
	s.Redacted += n
}
