package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/spell"
)

// isHelp reports whether a command line asks for help: -h, -help, --help
// or help as its first word.
func isHelp(args []string) bool {
	return len(args) > 0 && slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0])
}

// parseFlags parses args with fs. Asked for help (-h, --help), it prints
// head and the flags on stdout and reports help; a bad flag is said on
// stderr, with where the usage is.
func parseFlags(fs *flag.FlagSet, args []string, head string, stdout, stderr io.Writer) (help bool, err error) {
	fs.SetOutput(io.Discard) // the flag package's own messages: said here instead
	fs.Usage = func() {}
	switch err = fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout, head, fs)
		return true, nil
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n(%s --help shows the usage)\n", fs.Name(), err, fs.Name())
	}
	return false, err
}

// exitOf is a subcommand's status after parseFlags stopped it: 0 for the
// help it printed, exitUsage for a bad flag.
func exitOf(help bool) int {
	if help {
		return 0
	}
	return exitUsage
}

// printUsage prints head, then fs's flags as GNU tools spell them
// (--name; the single-dash spelling works too).
func printUsage(w io.Writer, head string, fs *flag.FlagSet) {
	flags := 0
	fs.VisitAll(func(*flag.Flag) { flags++ })
	if flags == 0 { // no heading over nothing
		head = strings.TrimSuffix(strings.TrimSuffix(head, "flags:\n"), "\n")
	}
	fmt.Fprint(w, head)
	fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(text, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && !strings.Contains(text, "(default") {
			fmt.Fprintf(w, " (default %v)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// durationFlag is a time.Duration flag whose errors say what is wrong in
// the words the configuration file's do.
type durationFlag struct{ d *time.Duration }

// zeroableFlag is a durationFlag whose 0 overrides the configuration file:
// it is kept as setZero, which overlay makes 0.
type zeroableFlag struct{ durationFlag }

// setZero is a zeroableFlag set to 0.
const setZero time.Duration = -1

func (f zeroableFlag) Set(v string) error {
	if err := f.durationFlag.Set(v); err != nil {
		return err
	}
	if *f.d == 0 {
		*f.d = setZero
	}
	return nil
}

func (f zeroableFlag) String() string {
	if f.d != nil && *f.d == setZero {
		return "0s"
	}
	return f.durationFlag.String()
}

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	if _, err := strconv.ParseFloat(v, 64); err == nil && v != "0" {
		return fmt.Errorf("%q: a duration needs a unit, such as %ss", v, v)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 500ms, 30s or 5m", v)
	}
	if d < 0 {
		return fmt.Errorf("%q: a duration must not be negative", v)
	}
	*f.d = d
	return nil
}

// subcommands are the first words that name a command of the proxy's.
var subcommands = []string{"demo", "example-server", "validate", "check", "hooks", "auth", "completion", "man", "help", "version"}

// nearSubcommand returns the subcommand a first word that is not one, and
// not a program either, seems to misspell (within two edits), or "".
func nearSubcommand(word string) string {
	if word == "" || strings.HasPrefix(word, "-") || slices.Contains(subcommands, word) {
		return ""
	}
	if _, err := exec.LookPath(word); err == nil {
		return "" // a server command: `mcp-cancel-proxy node srv.js` keeps working
	}
	return spell.Nearest(word, subcommands, 2)
}
