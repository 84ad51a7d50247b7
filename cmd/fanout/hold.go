package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/internal/handoff"
)

// holdMain runs `fanout hold` with args (those after "hold") until
// SIGTERM or SIGINT, and returns the exit code.
func holdMain(args []string) int {
	// One thread runs Go code: the holder only waits.
	runtime.GOMAXPROCS(1)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runHold(ctx, args, os.Stdout, os.Stderr)
}

// runHold is `fanout hold`: it holds fanout's listening socket open, so
// that connections to it wait in the kernel's backlog while fanout
// restarts instead of being refused, and hands it to fanout
// (--listen-from) at each start. It never accepts a connection itself.
func runHold(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("fanout hold", pflag.ContinueOnError)
	fs.SetOutput(stdout) // --help; errors go to stderr
	addr := fs.String("listen-address", "127.0.0.1:7080", "the address to hold: fanout's --listen-address (a loopback address)")
	dir := fs.String("socket-dir", "", "directory shared with fanout, which is given it as --listen-from (an emptyDir both containers mount); required")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fanout hold --socket-dir DIR [--listen-address ADDR]\n\n"+
			"Holds fanout's listening socket, as a second sidecar beside it, and hands it to fanout\n"+
			"(fanout --listen-from DIR) at each start. While fanout restarts the socket stays open, so\n"+
			"the client's connections wait in the kernel's backlog (net.core.somaxconn of them) until\n"+
			"fanout is back, instead of being refused. It never accepts a connection or reads data.\n"+
			"A restarted holder takes the socket back from the running fanout.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, args, stderr); done {
		return code
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "fanout hold: --socket-dir is required: the directory fanout's --listen-from names")
		return 2
	}
	if !isLoopbackAddr(*addr) {
		fmt.Fprintf(stderr, "fanout hold: --listen-address %q: want a loopback host:port such as 127.0.0.1:7080, as fanout's\n", *addr)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	fd, from, err := holdSocket(ctx, *addr, *dir)
	if err != nil {
		log.Error("fanout hold cannot hold the listening socket", "address", *addr, "error", err)
		return 1
	}
	srv, err := handoff.Serve(filepath.Join(*dir, handoff.HolderSocket), fd, log)
	if err != nil {
		log.Error("fanout hold cannot hand out the listening socket", "error", err)
		return 1
	}
	bound, _ := handoff.Addr(fd)
	_, backlog, err := handoff.Backlog(fd)
	if err != nil {
		backlog = -1
	}
	log.Info("holding the listening socket", "address", bound.String(), "from", from, "socket", filepath.Join(*dir, handoff.HolderSocket),
		"backlog", backlog)
	<-ctx.Done()
	_ = srv.Close()
	return 0
}

// holdSocket takes the socket from a running fanout (the holder
// restarted), or else binds addr.
func holdSocket(ctx context.Context, addr, dir string) (handoff.FD, string, error) {
	path := filepath.Join(dir, handoff.FanoutSocket)
	if _, err := os.Stat(path); err == nil {
		fctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fd, err := handoff.Fetch(fctx, path)
		cancel()
		if err == nil {
			if got, aerr := handoff.Addr(fd); aerr != nil || !handoff.SameAddress(got, addr) {
				syscall.Close(int(fd))
				return -1, "", fmt.Errorf("fanout at %s serves %v, not --listen-address %s: give both the same address", path, got, addr)
			}
			return fd, "fanout", nil
		}
		// A stale file of a fanout that is gone: bind.
	}
	fd, err := handoff.Bind(addr)
	if err != nil {
		return -1, "", fmt.Errorf("%w; is fanout running with this address but without --listen-from %s?", err, dir)
	}
	return fd, "bound", nil
}

// isLoopbackAddr accepts host:port with a loopback IP literal, as fanout's
// --listen-address check does without --allow-remote.
func isLoopbackAddr(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
