package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
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

// printUsage prints head, then fs's flags as GNU tools spell them
// (--name; the single-dash spelling works too).
func printUsage(w io.Writer, head string, fs *flag.FlagSet) {
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
