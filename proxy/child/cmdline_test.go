package child

import (
	"slices"
	"strings"
	"testing"
)

// The command lines below are what Windows would run; no Windows machine
// runs here, so they are checked against a model of the two parsers that
// read them: cmd.exe's (one pass of carets and quotes) and
// CommandLineToArgvW's, which a program's C runtime, Node and Go use.

const comspec = `C:\Windows\System32\cmd.exe`

// cmdPass models one pass of cmd.exe over a command line: outside quotes a
// caret escapes the next character and is removed; a quote not escaped
// toggles quoting, inside which everything is literal.
func cmdPass(s string) string {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '^' && !quoted && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == '"':
			quoted = !quoted
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// argvW models CommandLineToArgvW for the arguments after the program.
func argvW(s string) []string {
	var args []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\':
			n := 0
			for i+n < len(s) && s[i+n] == '\\' {
				n++
			}
			i += n
			if i < len(s) && s[i] == '"' {
				cur.WriteString(strings.Repeat(`\`, n/2))
				if n%2 == 1 {
					cur.WriteByte('"')
				} else {
					quoted = !quoted
				}
				i++
			} else {
				cur.WriteString(strings.Repeat(`\`, n))
			}
			inArg = true
		case c == '"':
			quoted = !quoted
			inArg = true
			i++
		case (c == ' ' || c == '\t') && !quoted:
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
			i++
		default:
			cur.WriteByte(c)
			inArg = true
			i++
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}

// argsSeen returns the arguments that file's program sees when Windows runs
// line: cmd.exe takes the quoted command after /s /c, runs file with the
// rest, and a batch file that hands its arguments on (%*) has them parsed
// once more by cmd.exe when shim is set.
func argsSeen(t *testing.T, line, file string, shim bool) []string {
	t.Helper()
	prefix := comspec + ` /d /s /c "`
	if !strings.HasPrefix(line, prefix) || !strings.HasSuffix(line, `"`) {
		t.Fatalf("command line %q is not %s...\"", line, prefix)
	}
	inner := cmdPass(line[len(prefix) : len(line)-1])
	rest, ok := strings.CutPrefix(inner, file)
	if !ok {
		t.Fatalf("cmd.exe runs %q, not %q", inner, file)
	}
	if shim {
		rest = cmdPass(rest)
	}
	return argvW(rest)
}

func TestBatchCommandLine(t *testing.T) {
	for _, tc := range []struct {
		file string
		args []string
		want string // the command line, when it is worth spelling out
	}{
		{file: `C:\Program Files\nodejs\npx.cmd`, args: []string{"-y", "@modelcontextprotocol/server-everything"},
			want: comspec + ` /d /s /c "C:\Program^ Files\nodejs\npx.cmd ^"-y^" ^"@modelcontextprotocol/server-everything^""`},
		{file: `C:\proj\node_modules\.bin\server.CMD`, args: []string{"a&b"},
			want: comspec + ` /d /s /c "C:\proj\node_modules\.bin\server.CMD ^^^"a^^^&b^^^""`},
		{file: `C:\srv\start.bat`, args: []string{`C:\Users\me\My Documents\`, `say "hi" & exit`, `100%`, `^caret|pipe<in>out`, ``, `\\server\share\`}},
		{file: `C:\srv\start.bat`, args: []string{`a\\"b`, `x\\`, `"`, `\"`, `%PATH%`, `!x!`, "tab\there", `(parens), [brackets]; semi`}},
		{file: `D:\bin\npm.cmd`, args: []string{"exec", "--", "tool", `--json={"a":"b c"}`}},
	} {
		line, batch, err := batchCommandLine(comspec, tc.file, tc.args)
		if err != nil || !batch {
			t.Fatalf("%s: batch %v, err %v", tc.file, batch, err)
		}
		if tc.want != "" && line != tc.want {
			t.Errorf("%s %q:\n got %s\nwant %s", tc.file, tc.args, line, tc.want)
		}
		shim := strings.Contains(strings.ToLower(tc.file), `node_modules\.bin`)
		if got := argsSeen(t, line, tc.file, shim); !slices.Equal(got, tc.args) {
			t.Errorf("%s: the program sees %q, want %q (line %s)", tc.file, got, tc.args, line)
		}
	}
}

func TestBatchCommandLineLeavesProgramsAlone(t *testing.T) {
	for _, file := range []string{`C:\Program Files\nodejs\node.exe`, `C:\tools\uvx.EXE`, `/usr/bin/npx`, `C:\x\script.ps1`} {
		if _, batch, _ := batchCommandLine(comspec, file, []string{"a&b"}); batch {
			t.Errorf("%s treated as a batch file", file)
		}
	}
}

func TestBatchCommandLineRefusesLineBreaks(t *testing.T) {
	for _, arg := range []string{"a\nb", "a\r\nb", "nul\x00"} {
		if _, _, err := batchCommandLine(comspec, `C:\x\npx.cmd`, []string{"ok", arg}); err != errLineBreak {
			t.Errorf("%q: err %v, want errLineBreak", arg, err)
		}
	}
}

// FuzzBatchCommandLine: whatever the arguments (short of a line break or
// NUL), the program run through cmd.exe sees exactly them, once or twice
// parsed by cmd.exe.
func FuzzBatchCommandLine(f *testing.F) {
	f.Add(`say "hi" & exit`, `C:\a b\`, false)
	f.Add(`a\\"b`, `^%x%^`, true)
	f.Add(``, `"`, true)
	f.Fuzz(func(t *testing.T, a, b string, shim bool) {
		args := []string{a, b}
		if strings.ContainsAny(a+b, "\r\n\x00") {
			return
		}
		file := `C:\srv\start.cmd`
		if shim {
			file = `C:\p\node_modules\.bin\srv.cmd`
		}
		line, _, err := batchCommandLine(comspec, file, args)
		if err != nil {
			t.Fatal(err)
		}
		if got := argsSeen(t, line, file, shim); !slices.Equal(got, args) {
			t.Errorf("the program sees %q, want %q (line %s)", got, args, line)
		}
	})
}
