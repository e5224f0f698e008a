package guide

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	_ "modernc.org/sqlite"

	"github.com/cairnhq/cairn/internal/eventually"
)

// The page puts Cairn's checkout here, beside the reader's module.
const checkout = "../cairn"

// Deadlines: a build or a test of the module, and a wait on a process of the job.
const (
	buildTime = 5 * time.Minute
	waitTime  = 2 * time.Minute
)

// script is what the test does for each command of the page, in the page's order (see the
// package documentation). Commands given twice on the page are listed twice.
var script = []struct {
	line string
	do   func(f *follower, c command)
}{
	{"mkdir scores && cd scores", (*follower).makeModule},
	{"cp ../cairn/go.sum .", (*follower).run},
	{"go mod tidy", (*follower).run},
	{"go build -o scores .", (*follower).run},
	{"./scores items.txt", (*follower).run},
	{"./scores items.txt", (*follower).run},
	{"sort data/calls.log | uniq -c", (*follower).runAndCountCalls},
	{"rm -rf data", (*follower).run},
	{"CAIRN_FAULTS=save.after-write.3=stall ./scores items.txt &", (*follower).startUntilThreeRows},
	{"sqlite3 data/scores.db 'SELECT count(*) FROM scores'    # illustrative: the test reads it with Go", (*follower).countRows},
	{`go build -C ../cairn -o "$PWD/cairn" ./cmd/cairn`, (*follower).run},
	{"CAIRN_NATS_URL=nats://127.0.0.1:39371 ./cairn status --pipeline scores run-1", (*follower).run},
	{"kill -9 %1", (*follower).kill},
	{"./scores items.txt", (*follower).runAndCheckRows},
	{"sort data/calls.log | uniq -c", (*follower).runAndCountCalls},
	{"go test", (*follower).run},
	{`CAIRN_FAULTS=save.after-write.3=exit@once ./scores -data trial items.txt; echo "exit $?"`, (*follower).run},
	{`CAIRN_FAULTS=save.after-write.3=exit@once ./scores -data trial items.txt; echo "exit $?"`, (*follower).runAndCheckTrial},
	{"./scores -serve items.txt &", (*follower).startUntilDone},
	{"export CAIRN_NATS_URL=nats://127.0.0.1:38305", (*follower).export},
	{"./cairn timeline --pipeline scores run-1", (*follower).run},
	{"./cairn faultmap --pipeline scores", (*follower).run},
	{"./cairn undo run-1 --pipeline scores --attr item=item-002 --wait", (*follower).runAndCheckUndone},
	{"kill %1", (*follower).stop},
}

// TestGuide follows docs/guide.md: the module made from its blocks outside the repository,
// its commands run in order, the job killed with SIGKILL in the middle of its write step and
// started again, and what it left checked after each: every item's row once with its score,
// the model called once an item across both processes, the run done; then a crash by
// CAIRN_FAULTS and its restart, the fault map and an undo of one item, through the cairn CLI.
func TestGuide(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a module of its own")
	}
	root := repoRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "docs", "guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePage(string(text))
	if err != nil {
		t.Fatalf("docs/guide.md: %v", err)
	}
	checkScript(t, p)
	checkFormatted(t, p)

	f := &follower{t: t, root: root, page: p, parent: t.TempDir(), env: environ()}
	t.Cleanup(f.cleanup)
	for i, s := range script {
		c := p.commands[i]
		t.Logf("$ %s", c.line)
		s.do(f, c)
	}
}

// checkScript fails the test where the page's commands and the script's differ.
func checkScript(t *testing.T, p page) {
	t.Helper()
	for i := range max(len(p.commands), len(script)) {
		switch {
		case i >= len(script):
			t.Fatalf("docs/guide.md:%d: command %q is not in the test's script: add it to script (guide_test.go)", p.commands[i].at, p.commands[i].line)
		case i >= len(p.commands):
			t.Fatalf("the test's script has %q, which docs/guide.md no longer has: remove it", script[i].line)
		case p.commands[i].line != script[i].line:
			t.Fatalf("docs/guide.md:%d: command %d is %q, the test's script has %q: make them one", p.commands[i].at, i+1, p.commands[i].line, script[i].line)
		}
	}
	for _, name := range []string{"go.mod", "items.txt", "job.go", "table.go", "main.go", "job_test.go"} {
		if _, ok := p.files[name]; !ok {
			t.Fatalf("docs/guide.md has no block for %s (```go file=%s)", name, name)
		}
	}
}

// checkFormatted fails the test for a Go file of the page that gofmt would change.
func checkFormatted(t *testing.T, p page) {
	t.Helper()
	for _, name := range p.order {
		if filepath.Ext(name) != ".go" {
			continue
		}
		b, err := format.Source([]byte(p.files[name]))
		if err != nil {
			t.Errorf("docs/guide.md, %s: %v", name, err)
		} else if string(b) != p.files[name] {
			t.Errorf("docs/guide.md, %s is not gofmt'd", name)
		}
	}
}

// follower follows the page: the reader's module, the environment its commands run in, and
// the job's process running in the background.
type follower struct {
	t      *testing.T
	root   string // the repository's root: where the page's ../cairn is
	page   page
	parent string // where the page's module folder is made
	dir    string // the module's folder
	env    []string
	bg     *process
}

// environ is the test's environment without the settings the page sets itself: the
// module proxy, cache and flags stay as they are, so that the module is tidied and built as
// the repository is (offline, when the module cache is warm).
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		// PWD: the shell takes its own from the folder a command runs in.
		if !strings.HasPrefix(kv, "CAIRN_") && !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "PWD=") && !strings.HasPrefix(kv, "OLDPWD=") {
			env = append(env, kv)
		}
	}
	return append(env, "GOWORK=off")
}

// expand is the command line with the checkout and the job's URL where this run has them.
func (f *follower) expand(line string) string {
	line = strings.ReplaceAll(line, checkout, f.root)
	if f.bg != nil {
		line = urlPattern.ReplaceAllLiteralString(line, f.bg.url())
	}
	return line
}

var urlPattern = regexp.MustCompile(`nats://127\.0\.0\.1:\d+`)

// sh runs line in the module's folder and returns its output; a command that fails fails the
// test.
func (f *follower) sh(line string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), buildTime)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", f.expand(line))
	cmd.Dir, cmd.Env = cmp.Or(f.dir, f.parent), f.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("$ %s: %v\n%s", line, err, out)
	}
	return string(out)
}

// shows fails the test for each line the page shows under c that out lacks.
func (f *follower) shows(c command, out string) {
	f.t.Helper()
	if lacks := missing(c.shown, out); len(lacks) > 0 {
		f.t.Errorf("docs/guide.md:%d: $ %s printed\n%s\nwithout the page's lines\n%s", c.at, c.line, out, strings.Join(lacks, "\n"))
	}
}

func (f *follower) run(c command) { f.shows(c, f.sh(c.line)) }

// makeModule makes the module's folder and writes the page's files into it, go.mod's
// replace pointing at the repository.
func (f *follower) makeModule(c command) {
	f.shows(c, f.sh(c.line))
	f.dir = filepath.Join(f.parent, "scores")
	for _, name := range f.page.order {
		body := f.page.files[name]
		if name == "go.mod" {
			if !strings.Contains(body, "=> "+checkout+"\n") {
				f.t.Fatalf("the page's go.mod has no replace => %s", checkout)
			}
			body = strings.ReplaceAll(body, "=> "+checkout+"\n", "=> "+f.root+"\n")
		}
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte(body), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *follower) export(c command) {
	name, value, ok := strings.Cut(strings.TrimPrefix(c.line, "export "), "=")
	if !ok {
		f.t.Fatalf("$ %s: no NAME=VALUE", c.line)
	}
	f.env = append(f.env, name+"="+f.expand(value))
}

// startUntilThreeRows starts the job stalled after its third row, and waits for the three.
func (f *follower) startUntilThreeRows(c command) {
	f.start(c)
	eventually.That(f.t, waitTime, "three rows saved, the job stalled", func() error {
		rows, err := f.rows("data")
		if err == nil && len(rows) != 3 {
			err = fmt.Errorf("%d rows", len(rows))
		}
		return err
	})
	f.shows(c, f.bg.output())
}

// startUntilDone starts the job and waits for its run to be done.
func (f *follower) startUntilDone(c command) {
	f.start(c)
	eventually.That(f.t, waitTime, "the run done", eventually.True(func() bool {
		return strings.Contains(f.bg.output(), "run-1 done")
	}))
	f.shows(c, f.bg.output())
}

func (f *follower) start(c command) {
	f.t.Helper()
	line, ok := strings.CutSuffix(c.line, " &")
	if !ok {
		f.t.Fatalf("$ %s: not a background command", c.line)
	}
	if f.bg != nil {
		f.t.Fatalf("$ %s: the job is running already", c.line)
	}
	// exec: the job is the shell's process itself, so that a signal reaches it.
	cmd := exec.Command("sh", "-c", "exec env "+f.expand(line))
	cmd.Dir, cmd.Env = f.dir, f.env
	f.bg = &process{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &f.bg.out, &f.bg.out
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() {
		f.bg.err = cmd.Wait()
		close(f.bg.done)
	}()
	eventually.That(f.t, waitTime, "the job's nats: line", func() error {
		select {
		case <-f.bg.done:
			f.t.Fatalf("$ %s: the job ended: %v\n%s", c.line, f.bg.err, f.bg.output())
		default:
		}
		if f.bg.url() == "" {
			return errors.New("no nats: line yet")
		}
		return nil
	})
}

// countRows is the page's look at the table, by the project's SQLite driver.
func (f *follower) countRows(c command) {
	rows, err := f.rows("data")
	if err != nil {
		f.t.Fatal(err)
	}
	f.shows(c, fmt.Sprint(len(rows)))
}

// kill kills the job with SIGKILL, in the middle of its write step: it stalled after its
// third row, and no fourth was written.
func (f *follower) kill(c command) {
	if c.line != "kill -9 %1" {
		f.t.Fatalf("$ %s: not kill -9", c.line)
	}
	f.signal(syscall.SIGKILL)
	var ee *exec.ExitError
	if !errors.As(f.bg.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		f.t.Fatalf("the job ended with %v, not killed by SIGKILL:\n%s", f.bg.err, f.bg.output())
	}
	if rows, err := f.rows("data"); err != nil || len(rows) != 3 {
		f.t.Fatalf("after the kill: rows %v (%v), want the three saved before it", rows, err)
	}
	f.bg = nil
}

// stop stops the job with SIGTERM: a clean stop, exit code 0.
func (f *follower) stop(c command) {
	if c.line != "kill %1" {
		f.t.Fatalf("$ %s: not kill", c.line)
	}
	f.signal(syscall.SIGTERM)
	if f.bg.err != nil {
		f.t.Fatalf("the job stopped with %v, want a clean stop:\n%s", f.bg.err, f.bg.output())
	}
	f.bg = nil
}

func (f *follower) signal(s syscall.Signal) {
	f.t.Helper()
	if f.bg == nil {
		f.t.Fatal("no job running in the background")
	}
	if err := f.bg.cmd.Process.Signal(s); err != nil {
		f.t.Fatal(err)
	}
	select {
	case <-f.bg.done:
	case <-time.After(waitTime):
		f.t.Fatalf("the job did not end within %s of %s", waitTime, s)
	}
}

func (f *follower) cleanup() {
	if f.bg != nil {
		_ = f.bg.cmd.Process.Kill()
		<-f.bg.done
	}
}

// runAndCountCalls runs the command and checks the model's log: each item called once.
func (f *follower) runAndCountCalls(c command) {
	f.run(c)
	f.calledOnce("data")
}

// runAndCheckRows runs the job again after the kill, and checks what it left: the run done,
// every item's row once with its score, the model called once an item across both processes.
func (f *follower) runAndCheckRows(c command) {
	f.run(c)
	f.savedAll("data", f.items())
	f.calledOnce("data")
}

// runAndCheckTrial runs the job again after the crash the fault made, and checks the trial's
// folder as the kill's.
func (f *follower) runAndCheckTrial(c command) {
	f.run(c)
	f.savedAll("trial", f.items())
	f.calledOnce("trial")
}

// runAndCheckUndone runs the undo of one item, and checks that its row alone is gone.
func (f *follower) runAndCheckUndone(c command) {
	f.run(c)
	want := slices.DeleteFunc(f.items(), func(r row) bool { return r.item == "item-002" })
	f.savedAll("data", want)
}

// row is one row of the job's table.
type row struct {
	key, item string
	score     int
}

// items are the rows the page's items.txt should leave in run-1: an item a line, scored by
// its letters.
func (f *follower) items() []row {
	var rows []row
	for i, line := range strings.Split(strings.TrimSpace(f.page.files["items.txt"]), "\n") {
		n := 0
		for _, r := range line {
			if unicode.IsLetter(r) {
				n++
			}
		}
		id := fmt.Sprintf("item-%03d", i+1)
		rows = append(rows, row{key: "run-1:score:" + id, item: id, score: n})
	}
	return rows
}

// rows reads the job's table in the data folder dir, in key order.
func (f *follower) rows(dir string) ([]row, error) {
	path := filepath.Join(f.dir, dir, "scores.db")
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rs, err := db.QueryContext(f.t.Context(), `SELECT key, item, score FROM scores ORDER BY key`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var rows []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.key, &r.item, &r.score); err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

func (f *follower) savedAll(dir string, want []row) {
	f.t.Helper()
	got, err := f.rows(dir)
	if err != nil {
		f.t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("%s/scores.db holds %v, want %v", dir, got, want)
	}
}

// calledOnce checks the model's log in the data folder dir: every item called, each once.
func (f *follower) calledOnce(dir string) {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, dir, "calls.log"))
	if err != nil {
		f.t.Fatal(err)
	}
	calls := strings.Fields(string(b))
	slices.Sort(calls)
	var want []string
	for _, r := range f.items() {
		want = append(want, r.item)
	}
	if !slices.Equal(calls, want) {
		f.t.Errorf("%s/calls.log: the model was called for %v, want each item once: %v", dir, calls, want)
	}
}

// process is the job running in the background.
type process struct {
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
	err  error // once done is closed
}

func (p *process) output() string { return p.out.String() }

// url is the job's NATS, from its nats: line.
func (p *process) url() string {
	m := regexp.MustCompile(`(?m)^nats: (nats://\S+)$`).FindStringSubmatch(p.output())
	if m == nil {
		return ""
	}
	return m[1]
}

// syncBuffer is what a process printed, read while it prints.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// repoRoot is the repository's root, two folders above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(b), "module github.com/cairnhq/cairn\n") {
		t.Fatalf("%s is not Cairn's root: %v", root, err)
	}
	return root
}
