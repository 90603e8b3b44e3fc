package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/wasmhost/wasmhost/admin/client"
)

// List the plugins a daemon knows, and their state.
func Example() {
	c, err := client.Dial(client.DefaultSocketPath)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	plugins, err := client.ListAllPlugins(context.Background(), c) // every page
	if err != nil {
		log.Fatal(err) // e.g. "no daemon is listening on /var/lib/wasmhost/admin.sock: is wasmhost running? …"
	}
	for _, p := range plugins {
		fmt.Println(p.GetSocket(), p.GetType(), p.GetName(), p.GetState())
	}
}
