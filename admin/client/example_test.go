package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// List the plugins a daemon knows, and their state.
func Example() {
	c, err := client.Dial(client.DefaultSocketPath)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	resp, err := c.ListPlugins(context.Background(), &adminv1.ListPluginsRequest{})
	if err != nil {
		log.Fatal(err) // e.g. "no daemon is listening on /var/lib/wasmhost/admin.sock: is wasmhost running? …"
	}
	for _, p := range resp.GetPlugins() {
		fmt.Println(p.GetSocket(), p.GetType(), p.GetName(), p.GetState())
	}
}
