package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// proc is a child process of the pipeline's binary, its output in a log file.
type proc struct {
	cmd  *exec.Cmd
	name string
	log  string
	done chan struct{} // closed when it has ended; err is then its Wait error
	err  error
	in   io.WriteCloser // its standard input, when kept open
}

// start runs bin args with env; its standard error (and standard output unless lines is
// given) goes to logPath, each line of its standard output to lines.
func start(bin string, args, env []string, logPath string, stdin bool, lines func(string)) (*proc, error) {
	name := strings.Join(append([]string{filepath.Base(bin)}, args...), " ")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("the log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stderr = logf
	dieWithParent(cmd)
	p := &proc{cmd: cmd, name: name, log: logPath, done: make(chan struct{})}
	if stdin {
		if p.in, err = cmd.StdinPipe(); err != nil {
			logf.Close()
			return nil, err
		}
	}
	var out io.ReadCloser
	if lines != nil {
		if out, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return nil, err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		if out != nil {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 4<<20)
			for sc.Scan() {
				lines(sc.Text())
			}
			_, _ = io.Copy(io.Discard, out)
		}
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// code is the process's exit code once it has ended (-1 when a signal ended it).
func (p *proc) code() int {
	var exit *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &exit):
		return exit.ExitCode()
	default:
		return -1
	}
}

// wait waits for the process to end, up to ctx.
func (p *proc) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s did not end: %w", p.name, ctx.Err())
	}
}

// stop ends the process: its standard input closed, SIGTERM, and after grace SIGKILL.
func (p *proc) stop(grace time.Duration) {
	if p.in != nil {
		_ = p.in.Close()
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logEnd is the last lines of the process's log, for an error.
func (p *proc) logEnd() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
