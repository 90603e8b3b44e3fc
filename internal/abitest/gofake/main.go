// Command gofake is a Go handler whose calls do, by the plugin's name, what the daemon limits or
// refuses: its tests run each in the Go SDK's fake host (guest.FakeHost) and in the daemon's
// host (the harness), and check that both end the same way, with the same reason.
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/plugincall"
)

// The plugin types it handles: two, to tell their stores apart.
const (
	TypeA = "twin.test/a"
	TypeB = "twin.test/b"
)

type handler struct{}

func (handler) Validate(p guest.Plugin) error {
	switch p.Name {
	case "reject":
		return guest.Reject("plugin " + p.Name + " is refused")
	case "fail":
		return errors.New("")
	case "panic":
		panic("boom")
	case "publish":
		return guest.Publish("k", "v")
	}
	return nil
}

func (handler) Register(p guest.Plugin) error {
	switch p.Name {
	case "store": // the type's store has no owner yet
		if v, ok, err := guest.KV.Get("owner"); err != nil || ok {
			return errors.New("the store is owned by " + string(v) + " already")
		}
		if err := guest.KV.Set("owner", []byte(p.Type)); err != nil {
			return err
		}
	case "keys": // empty values until the store refuses one
		return fill("k", 0)
	case "bytes": // values of the largest size until the store refuses one
		return fill("v", abi.MaxValueBytes)
	case "one":
		return guest.KV.Set("one", []byte("1"))
	case "publish-keys":
		for i := range 65 {
			if err := guest.Publish("k"+strconv.Itoa(i), "v"); err != nil {
				return err
			}
		}
	case "publish-bytes":
		for i := range 2 {
			if err := guest.Publish("k"+strconv.Itoa(i), strings.Repeat("v", abi.MaxValueBytes-2)); err != nil {
				return err
			}
		}
	case "log-lines":
		for i := range 1001 {
			guest.Log(guest.LevelInfo, "line "+strconv.Itoa(i))
		}
	case "log-bytes":
		for range 17 {
			guest.Log(guest.LevelInfo, strings.Repeat("x", abi.MaxLogLineBytes))
		}
	case "calls":
		for range 17 {
			if _, err := plugincall.Call("/twin.Echo/Echo", nil); err != nil {
				return err
			}
		}
	case "no-endpoint", "huge", "down", "big":
		b, err := plugincall.Call("/twin.Echo/"+p.Name, nil)
		if err != nil {
			return err
		}
		return guest.Publish("len", strconv.Itoa(len(b)))
	}
	return guest.Publish("endpoint", p.Endpoint)
}

// fill sets keys prefix0, prefix1, ... to values of size bytes until one is refused, and returns
// why.
func fill(prefix string, size int) error {
	v := make([]byte, size)
	for i := 0; ; i++ {
		if err := guest.KV.Set(prefix+strconv.Itoa(i), v); err != nil {
			return err
		}
	}
}

func (handler) Deregister(p guest.Plugin) error {
	switch p.Name {
	case "store":
		return guest.KV.Delete("owner")
	case "keys", "bytes", "one": // gives the room back
		for _, prefix := range []string{"k", "v"} {
			for i := range abi.MaxKVEntries + 1 {
				if err := guest.KV.Delete(prefix + strconv.Itoa(i)); err != nil {
					return err
				}
			}
		}
		return guest.KV.Delete("one")
	}
	return nil
}

func init() {
	guest.Handle(guest.Manifest{PluginTypes: []string{TypeA, TypeB}, Name: "gofake"}, handler{})
}

func main() {}
