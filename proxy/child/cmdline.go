package child

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
)

// Windows runs a batch file (npx.cmd, npm.cmd, a server's start.bat)
// through cmd.exe, which re-parses the command line by rules of its own:
// Go's quoting (for CommandLineToArgvW) is not enough, and an argument
// holding & | < > ^ % or a quote would be cut, or run as a command. So a
// batch file is started as cmd.exe /d /s /c "COMMAND ARGS" with every
// argument quoted for CommandLineToArgvW (https://qntm.org/cmd) and then
// every cmd.exe metacharacter, quotes included, escaped with a caret, so
// that cmd.exe never enters a quoted state and removes exactly the carets
// added. An npm shim (node_modules\.bin\*.cmd) hands its arguments on
// through a second cmd.exe pass (%*), so its arguments are escaped twice.
// This is the scheme of cross-spawn, which npm's tools use, with qntm's
// handling of backslashes before a quote.

// cmdMeta holds the characters cmd.exe treats specially.
const cmdMeta = "()[]%!^\"`<>&|;, *?"

// errLineBreak refuses an argument that no batch file can be given.
var errLineBreak = errors.New("a batch file (.cmd, .bat) cannot be given an argument holding a line break or NUL: cmd.exe would end the command there")

// batchCommandLine returns the command line that runs file, a batch file,
// with args through comspec, and true; or false when file is not a batch
// file (.bat or .cmd), which needs no such treatment.
func batchCommandLine(comspec, file string, args []string) (string, bool, error) {
	ext := strings.ToLower(filepath.Ext(file))
	if ext != ".cmd" && ext != ".bat" {
		return "", false, nil
	}
	for _, a := range args {
		if strings.ContainsAny(a, "\r\n\x00") {
			return "", true, errLineBreak
		}
	}
	twice := isNpmShim(file)
	var b strings.Builder
	b.WriteString(quoteProgram(comspec))
	b.WriteString(` /d /s /c "`)
	b.WriteString(caretEscape(file))
	for _, a := range args {
		b.WriteByte(' ')
		q := caretEscape(quoteArg(a))
		if twice {
			q = caretEscape(q)
		}
		b.WriteString(q)
	}
	b.WriteByte('"')
	return b.String(), true, nil
}

// isNpmShim reports whether file is a command shim that npm installed.
func isNpmShim(file string) bool {
	dir, name := path.Split(strings.ToLower(strings.ReplaceAll(file, `\`, "/")))
	return strings.HasSuffix(dir, "node_modules/.bin/") && strings.HasSuffix(name, ".cmd")
}

// quoteArg quotes an argument for CommandLineToArgvW: always in quotes;
// backslashes doubled where they precede a quote (or the closing one).
func quoteArg(a string) string {
	var b strings.Builder
	b.WriteByte('"')
	slashes := 0
	for i := 0; i < len(a); i++ {
		switch c := a[i]; c {
		case '\\':
			slashes++
			continue
		case '"':
			b.WriteString(strings.Repeat(`\`, 2*slashes+1))
			b.WriteByte(c)
		default:
			b.WriteString(strings.Repeat(`\`, slashes))
			b.WriteByte(c)
		}
		slashes = 0
	}
	b.WriteString(strings.Repeat(`\`, 2*slashes))
	b.WriteByte('"')
	return b.String()
}

// caretEscape puts a caret before every cmd.exe metacharacter.
func caretEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(cmdMeta, s[i]) >= 0 {
			b.WriteByte('^')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// quoteProgram quotes the program's path when it holds a space.
func quoteProgram(p string) string {
	if strings.ContainsAny(p, " \t") {
		return `"` + p + `"`
	}
	return p
}
