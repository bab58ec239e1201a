// Command crucible runs work pods of a hub controller on spoke clusters with no
// stored credentials. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"crucible.dev/crucible/internal/cli"
	"crucible.dev/crucible/internal/controller"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, controller.NewCommand())
	stop()
	if err == nil {
		return
	}
	code := 1
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		code = ee.Code
	}
	// Interrupted (exit 130, Ctrl-C) needs no message.
	if !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "crucible:", err)
	}
	os.Exit(code)
}
