package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
)

// usage prints fanout --help to w: what the sidecar does, then fs's flags.
func usage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "Usage: fanout --kubeconfig PATH [flags]\n       fanout status [--admin-address ADDR] [--watch]   (see fanout status --help)\n"+
		"       fanout top [--admin-address ADDR] [--once] [-o json]     (see fanout top --help)\n"+
		"       fanout hold --socket-dir DIR [--listen-address ADDR]      (holds the listener across restarts; see fanout hold --help)\n"+
		"       fanout version                                            (version, commit and Go version; also --version)\n\n"+
		"fanout listens on a loopback address for a Kubernetes client (point its kubeconfig at\n"+
		"http://127.0.0.1:7080) and spreads each request over mTLS HTTP/2 connections to every\n"+
		"kube-apiserver endpoint, with the client's own certificate or token.\n\n"+
		"Exit codes: 0 after --help, --version or SIGTERM; 2 for bad flags or arguments; 1 when fanout\n"+
		"cannot start (the cause is the one error line on stderr) or stop cleanly.\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// exit prints a message for a command-line error and ends the process.
func exit(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fanout: "+format+"\n", args...)
	os.Exit(code)
}

// parseSubcommand parses a subcommand's flags, which take no positional
// arguments. When it returns done, the subcommand ends with code: 0 after
// --help, 2 (the error said on stderr) for bad flags or arguments.
func parseSubcommand(fs *pflag.FlagSet, args []string, stderr io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return 0, true
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2, true
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return 2, true
	}
	return 0, false
}
