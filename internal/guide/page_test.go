package guide

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
)

// page is what docs/guide.md gives the test: the module's files, and its commands in order.
type page struct {
	files    map[string]string // by name, as the page spells them
	order    []string          // the files' names, in the page's order
	commands []command
}

// command is one "$ " line of the page and the output the page shows under it.
type command struct {
	line  string   // after "$ "
	shown []string // the output lines, as the page shows them
	at    int      // the line of the page it is on, from 1
}

// parsePage reads the page's fenced blocks: those whose info string names a file are files,
// the "$ " lines of the others commands.
func parsePage(text string) (page, error) {
	p := page{files: map[string]string{}}
	var (
		fence string // the open block's fence; "" outside a block
		file  string // the open block's file; "" when it is no file
		body  strings.Builder
		cmd   *command
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence == "" {
			if f, info, ok := openFence(line); ok {
				fence, file = f, fileOf(info)
				body.Reset()
			}
			continue
		}
		if line == fence {
			if file != "" {
				if _, dup := p.files[file]; dup {
					return p, fmt.Errorf("line %d: file %s is given twice", n, file)
				}
				p.files[file] = body.String()
				p.order = append(p.order, file)
			}
			if cmd != nil {
				p.commands = append(p.commands, *cmd)
				cmd = nil
			}
			fence = ""
			continue
		}
		switch {
		case file != "":
			body.WriteString(line + "\n")
		case strings.HasPrefix(line, "$ "):
			if cmd != nil {
				p.commands = append(p.commands, *cmd)
			}
			cmd = &command{line: strings.TrimPrefix(line, "$ "), at: n}
		case cmd != nil:
			cmd.shown = append(cmd.shown, line)
		}
	}
	if fence != "" {
		return p, fmt.Errorf("a block is not closed (%s)", fence)
	}
	return p, sc.Err()
}

// openFence reports whether line opens a fenced block, with its fence and info string.
func openFence(line string) (fence, info string, ok bool) {
	n := len(line) - len(strings.TrimLeft(line, "`"))
	if n < 3 || strings.Contains(line[n:], "`") {
		return "", "", false
	}
	return line[:n], strings.TrimSpace(line[n:]), true
}

// fileOf is the file an info string names ("go file=job.go": job.go), or "".
func fileOf(info string) string {
	for _, f := range strings.Fields(info) {
		if name, ok := strings.CutPrefix(f, "file="); ok {
			return name
		}
	}
	return ""
}

// masks are the parts of an output line that change from run to run.
var masks = []struct {
	re *regexp.Regexp
	to string
}{
	{regexp.MustCompile(`nats://127\.0\.0\.1:\d+`), "nats://127.0.0.1:PORT"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d\.\d+\b`), "TIME"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s)\b`), "DURATION"},
	{regexp.MustCompile(`\b([a-z-]+)/[^/\s]+/\d+-\w+`), "$1/OWNER"}, // a lease owner: service/host/pid-nuid
	{regexp.MustCompile(`sha256:[0-9a-f]+`), "sha256:DIGEST"},
}

// normal is line with what changes masked and its spaces collapsed.
func normal(line string) string {
	for _, m := range masks {
		line = m.re.ReplaceAllString(line, m.to)
	}
	return strings.Join(strings.Fields(line), " ")
}

// missing returns the lines of shown that out (what a command printed) lacks: each must be a
// line of out once masked, or the start of one when it ends in "…"; a line "…" stands for
// lines the page leaves out.
func missing(shown []string, out string) []string {
	got := strings.Split(out, "\n")
	for i := range got {
		got[i] = normal(got[i])
	}
	var lacks []string
	for _, s := range shown {
		want, prefix := strings.CutSuffix(normal(s), "…")
		want = strings.TrimSpace(want)
		if want == "" {
			continue
		}
		found := false
		for _, g := range got {
			if g == want || (prefix && strings.HasPrefix(g, want)) {
				found = true
				break
			}
		}
		if !found {
			lacks = append(lacks, s)
		}
	}
	return lacks
}
