package config_test

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/wasmhost/wasmhost/internal/config"
)

// docRow is one row of docs/configuration.md's Keys table.
type docRow struct {
	key, def, flag, meaning, who string
}

// docKeys reads the Keys table of docs/configuration.md, and the count its prose states.
func docKeys(t *testing.T) (rows map[string]docRow, order []string, stated int) {
	t.Helper()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	sec := doc[strings.Index(doc, "## Keys"):strings.Index(doc, "## Constants")]
	m := regexp.MustCompile(`The file has (\d+) keys`).FindStringSubmatch(sec)
	if m == nil {
		t.Fatal(`docs/configuration.md's Keys does not say "The file has N keys"`)
	}
	stated, _ = strconv.Atoi(m[1])
	rows = map[string]docRow{}
	for line := range strings.SplitSeq(sec, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		c := strings.Split(line, "|")
		if len(c) != 7 {
			t.Errorf("docs/configuration.md: a row of %d columns, want 5 (key, default, flag, meaning, who changes it and why): %.80s", len(c)-2, line)
			continue
		}
		r := docRow{strings.Trim(strings.TrimSpace(c[1]), "`"), strings.TrimSpace(c[2]), strings.TrimSpace(c[3]), strings.TrimSpace(c[4]), strings.TrimSpace(c[5])}
		if _, dup := rows[r.key]; dup {
			t.Errorf("docs/configuration.md has two rows for %s", r.key)
		}
		rows[r.key] = r
		order = append(order, r.key)
	}
	return rows, order, stated
}

// codeKeys walks the Config type as the file is read: every key a file may set, with its
// default value (a map's entries as <key>.<T>.…, with the zero value of an entry).
func codeKeys() map[string]reflect.Value {
	out := map[string]reflect.Value{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			key, fv := prefix+name, v.Field(i)
			switch {
			case f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(reflect.TypeFor[yaml.Unmarshaler]()):
				walk(key+".", fv)
			case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
				walk(key+".<T>.", reflect.New(f.Type.Elem()).Elem())
			default:
				out[key] = fv
			}
		}
	}
	walk("", reflect.ValueOf(config.Default()))
	return out
}

// TestKeysCounted: the count docs/configuration.md states is the number of keys a file may set,
// each key has its row and each row its key; and the config does not grow past 61 without a
// decision to change this test (issue 31: 88 keys became 59; issue 30 added the kubelet's two
// tracing keys, tracing.endpoint and tracing.samplingRatePerMillion).
func TestKeysCounted(t *testing.T) {
	rows, order, stated := docKeys(t)
	code := codeKeys()
	for key := range code {
		if _, ok := rows[key]; !ok {
			t.Errorf("key %s has no row in docs/configuration.md's Keys", key)
		}
	}
	for _, key := range order {
		if _, ok := code[key]; !ok {
			t.Errorf("docs/configuration.md's Keys has a row for %s, which no file can set", key)
		}
	}
	if stated != len(code) || stated != len(rows) {
		t.Errorf("docs/configuration.md says the file has %d keys; the code has %d, the table %d rows", stated, len(code), len(rows))
	}
	if len(code) > 61 {
		t.Errorf("%d keys: a key is only for a limit or a choice an operator has a reason to make; make the others constants (docs/configuration.md, Constants)", len(code))
	}
}

// TestEveryKeySaysWhoAndWhy: each row of the Keys table has its last column, one sentence that
// starts with who changes the key ("The operator …", or "Nobody" for the format's own) and
// says why. A new key without it fails here.
func TestEveryKeySaysWhoAndWhy(t *testing.T) {
	rows, _, _ := docKeys(t)
	for key, r := range rows {
		if !(strings.HasPrefix(r.who, "The operator") || strings.HasPrefix(r.who, "Nobody")) || !strings.HasSuffix(r.who, ".") || len(r.who) < 30 {
			t.Errorf("docs/configuration.md: %s: the last column must be a sentence of who changes it and why (\"The operator of …, to …\"), got %q", key, r.who)
		}
	}
}

// notYAML are the default cells of the table that are not a value `config defaults` prints,
// each because the default is worked out where the daemon runs.
var notYAML = map[string]string{
	"admin.socket":               "`<stateDir>/admin.sock`", // made from stateDir at start
	"publish.nodeName":           "`$NODE_NAME`",            // read from the environment
	"handlers.capture.redact":    "PEM private keys, JSON Web Tokens, bearer tokens",
	"handlers.types.<T>.capture": "`true`", // a nil *bool: captured unless false
}

// TestDocsDefaultsAreTheCode: the default column of every key is the value `wasmhost config
// defaults` prints (config.Default, the one place a default is written): the first value in
// backquotes, read as the file would read it, or "none" for an empty one.
func TestDocsDefaultsAreTheCode(t *testing.T) {
	rows, _, _ := docKeys(t)
	firstQuoted := regexp.MustCompile("^`([^`]*)`")
	for key, v := range codeKeys() {
		r, ok := rows[key]
		if !ok {
			continue // TestKeysCounted
		}
		if want, ok := notYAML[key]; ok {
			if r.def != want {
				t.Errorf("%s: docs' default %q, want %q", key, r.def, want)
			}
			continue
		}
		got, err := yaml.Marshal(v.Interface())
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(r.def, "none") {
			if !v.IsZero() && v.Len() != 0 {
				t.Errorf("%s: docs say none, the code's default is %s", key, got)
			}
			continue
		}
		m := firstQuoted.FindStringSubmatch(r.def)
		if m == nil {
			t.Errorf("%s: docs' default %q is neither none nor a `value`", key, r.def)
			continue
		}
		doc := reflect.New(v.Type())
		if err := yaml.Unmarshal([]byte(m[1]), doc.Interface()); err != nil {
			t.Errorf("%s: docs' default %q does not read as the key's value: %v", key, m[1], err)
			continue
		}
		if !reflect.DeepEqual(doc.Elem().Interface(), v.Interface()) {
			t.Errorf("%s: docs' default is %s, the code's (config defaults) %s", key, m[1], strings.TrimSpace(string(got)))
		}
	}
}

// TestConstantsDocumented: every key that is a constant now has its row under Constants, with
// the value the daemon uses (config.Retired, read from the code), and none under Keys.
func TestConstantsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	constants := doc[strings.Index(doc, "## Constants"):strings.Index(doc, "## Handler limits")]
	rows, _, _ := docKeys(t)
	var found []string
	for line := range strings.SplitSeq(constants, "\n") {
		c := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(c) < 4 {
			continue
		}
		key := strings.Trim(strings.TrimSpace(c[1]), "`")
		found = append(found, key)
		want, ok := config.Retired[key]
		if !ok {
			t.Errorf("docs/configuration.md's Constants has %s, which config.Retired does not know: a file that sets it would be refused", key)
			continue
		}
		want, _, _ = strings.Cut(want, ",")
		if got := strings.TrimSpace(c[2]); got != "`"+want+"`" {
			t.Errorf("docs/configuration.md's Constants: %s is %s, the code's value %s", key, got, want)
		}
		if len(strings.TrimSpace(c[3])) < 40 {
			t.Errorf("docs/configuration.md's Constants: %s does not say why it is a constant", key)
		}
	}
	for key := range config.Retired {
		if !slices.Contains(found, key) {
			t.Errorf("docs/configuration.md's Constants has no row for %s", key)
		}
		if _, ok := rows[key]; ok {
			t.Errorf("docs/configuration.md still lists %s as a key", key)
		}
	}
	if m := regexp.MustCompile(`(\d+) values were keys once`).FindStringSubmatch(constants); m == nil || m[1] != strconv.Itoa(len(config.Retired)) {
		t.Errorf("docs/configuration.md's Constants does not say \"%d values were keys once\"", len(config.Retired))
	}
}
