package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wasmhost/wasmhost/internal/adminview"
	"github.com/wasmhost/wasmhost/internal/handlercheck"
)

// sameDocument fails the test unless the YAML text holds the same document as the JSON text:
// the same keys and the same values.
func sameDocument(t *testing.T, jsonText, yamlText string) {
	t.Helper()
	var fromJSON, fromYAML any
	if err := json.Unmarshal([]byte(jsonText), &fromJSON); err != nil {
		t.Fatalf("JSON: %v\n%s", err, jsonText)
	}
	var y any
	if err := yaml.Unmarshal([]byte(yamlText), &y); err != nil {
		t.Fatalf("YAML: %v\n%s", err, yamlText)
	}
	// Through JSON, so that numbers are float64 on both sides.
	b, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("YAML as JSON: %v\n%s", err, yamlText)
	}
	if err := json.Unmarshal(b, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("-o yaml and -o json differ:\nJSON:\n%s\nYAML:\n%s", jsonText, yamlText)
	}
}

// TestYAMLIsTheJSON: -o yaml is the JSON document in block style, keys in the same order;
// strings that would read as something else are quoted.
func TestYAMLIsTheJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	v := struct {
		Name      string            `json:"name"`
		Versions  []string          `json:"versions"`
		Empty     []string          `json:"empty"`
		Numbers   []string          `json:"numbers"`
		Published map[string]string `json:"published"`
		At        *time.Time        `json:"at"`
		Calls     uint64            `json:"calls"`
		Ready     bool              `json:"ready"`
		LastError string            `json:"lastError"`
	}{"csi.example.com", []string{"1.0.0", "v1"}, []string{}, []string{"1", "true", "null", "0x1F"},
		map[string]string{"node_id": "n1", "z": "", "a": "x: y"}, &at, 12, true, "line one\nline two"}
	got, err := toYAML(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `name: csi.example.com
versions:
  - 1.0.0
  - v1
empty: []
numbers:
  - "1"
  - "true"
  - "null"
  - "0x1F"
published:
  a: 'x: y'
  node_id: n1
  z: ""
at: "2026-11-23T12:00:00Z"
calls: 12
ready: true
lastError: |-
  line one
  line two
`
	if string(got) != want {
		t.Errorf("toYAML:\n%s\nwant:\n%s", got, want)
	}
	var j bytes.Buffer
	if err := writeJSON(&j, v, true); err != nil {
		t.Fatal(err)
	}
	sameDocument(t, j.String(), string(got))

	var streamed bytes.Buffer
	if err := writeStreamed(&streamed, "yaml", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if streamed.String() != "---\na: 1\n" {
		t.Errorf("a streamed YAML document: %q", streamed.String())
	}
}

// TestViewKeysAreCamelCase: every key of -o json and -o yaml, in every command, is camelCase
// as in the config file and Kubernetes objects.
func TestViewKeysAreCamelCase(t *testing.T) {
	camel := regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	seen := map[reflect.Type]bool{}
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ == reflect.TypeFor[time.Time]() {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				t.Errorf("%s.%s has no json tag: its key would be %q", path, f.Name, f.Name)
			} else if !camel.MatchString(name) {
				t.Errorf("%s.%s: key %q is not camelCase", path, f.Name, name)
			}
			walk(path+"."+name, f.Type)
		}
	}
	for _, v := range []any{adminview.Plugin{}, adminview.Handler{}, adminview.Event{}, adminview.Status{}, adminview.History{}, handlercheck.TestReport{}, handlercheck.InspectReport{}} {
		walk(reflect.TypeOf(v).Name(), reflect.TypeOf(v))
	}
}

// TestOutputCompletion: the shell completes -o with the formats of each command, and no file
// names.
func TestOutputCompletion(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		want []string
	}{
		{[]string{"plugins"}, []string{"table", "wide", "json", "yaml"}},
		{[]string{"handlers"}, []string{"table", "wide", "json", "yaml"}},
		{[]string{"watch"}, []string{"table", "json", "yaml"}},
		{[]string{"status"}, []string{"text", "json", "yaml"}},
		{[]string{"handler", "test"}, []string{"text", "json", "yaml"}},
		{[]string{"handler", "inspect"}, []string{"text", "json", "yaml"}},
	} {
		for _, flag := range []string{"-o", "--output"} {
			out, err := runRoot(t, append(append([]string{"__complete"}, tc.cmd...), flag, "")...)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.cmd, flag, err)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			var got []string
			for _, l := range lines[:len(lines)-1] {
				value, desc, _ := strings.Cut(l, "\t")
				if desc == "" {
					t.Errorf("%s %s: %q has no description", tc.cmd, flag, value)
				}
				got = append(got, value)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s %s completes %q, want %q", tc.cmd, flag, got, tc.want)
			}
			// :4 is cobra.ShellCompDirectiveNoFileComp: the shell offers no file names.
			if last := lines[len(lines)-1]; last != ":4" {
				t.Errorf("%s %s: directive %q, want :4 (no file completion)", tc.cmd, flag, last)
			}
		}
		// A prefix narrows the choice, as the shell asks for it.
		out, err := runRoot(t, append(append([]string{"__complete"}, tc.cmd...), "-o", "y")...)
		if err != nil || !strings.HasPrefix(out, "yaml\t") || strings.Count(out, "\n") != 2 {
			t.Errorf("%s -o y completes:\n%s(%v), want yaml alone", tc.cmd, out, err)
		}
	}
}
