// Command sdkmod is a handler module that exercises the SDK's edges for module_test.go: rejections
// through wrapping, failures, panics, plugin calls (with a response over the first buffer), and
// Publish outside Register. It uses neither Log nor KV, so it must not import them.
package main

import (
	"errors"
	"strconv"

	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/plugincall"
)

type handler struct{}

func (handler) Validate(p guest.Plugin) error {
	switch p.Name {
	case "reject":
		return errors.Join(errors.New("checked the versions"), guest.Reject("version 9 is not supported"))
	case "fail":
		return errors.New("the handler is broken")
	case "panic":
		var s []string
		return errors.New(s[len(p.Versions)])
	}
	return nil
}

func (handler) Register(p guest.Plugin) error {
	resp, err := plugincall.Call("/test.Echo/Echo", []byte(p.Name))
	if err != nil {
		return err
	}
	if err := guest.Publish("len", strconv.Itoa(len(resp))); err != nil {
		return err
	}
	return guest.Publish("head", string(resp[:min(len(resp), 16)]))
}

func (handler) Deregister(p guest.Plugin) error {
	return guest.Publish("not", "allowed here")
}

func init() {
	guest.Handle(guest.Manifest{PluginTypes: []string{"sdk.test/a", "sdk.test/b"}, Name: "sdkmod", Version: "0.0.1"}, handler{})
}

func main() {}
