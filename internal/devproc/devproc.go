// Package devproc runs a Cairn command (`cairn dev`, or one service's binary) as a child
// process, so that a fault's exit is a real process exit: the demo and the end-to-end tests
// start it, wait for its "ready", and watch it die, signal it or stop it.
package devproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Proc is a running child process that printed "ready".
type Proc struct {
	cmd  *exec.Cmd
	name string        // the command line, for messages
	done chan struct{} // closed when the process has ended; err is then its Wait error
	err  error
	// Log is the file that holds its standard error.
	Log string
}

// Start runs `bin dev` with env, its standard error in logPath, and waits up to within for
// the "ready" line.
func Start(bin string, env []string, logPath string, within time.Duration) (*Proc, error) {
	return StartArgs(bin, []string{"dev"}, env, logPath, within)
}

// StartArgs runs bin with args and env, its standard error in logPath, and waits up to within
// for the line "ready" on its standard output. The rest of its standard output is discarded.
func StartArgs(bin string, args []string, env []string, logPath string, within time.Duration) (*Proc, error) {
	name := strings.Join(append([]string{filepath.Base(bin)}, args...), " ")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	// The child dies with its parent: a test that panics leaves no server running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = env
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{cmd: cmd, name: name, done: make(chan struct{}), Log: logPath}
	ready := make(chan struct{})
	go func() {
		// Read standard output to its end before Wait, which closes the pipe.
		sc := bufio.NewScanner(out)
		seen := false
		for sc.Scan() {
			if !seen && strings.TrimSpace(sc.Text()) == "ready" {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s ended before it was ready (%v); see %s, which ends:\n%s", name, p.err, logPath, logEnd(logPath))
	case <-t.C:
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("%s not ready within %s; see %s", name, within, logPath)
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process. Signalling a process that has ended returns
// os.ErrProcessDone.
func (p *Proc) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// Kill kills the process (SIGKILL, which ends a stopped process too) and waits until it
// has ended.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Wait waits up to limit for the process to end by itself and returns its exit code (-1
// if a signal ended it).
func (p *Proc) Wait(limit time.Duration) (int, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			return ee.ExitCode(), nil
		}
		return 0, p.err
	case <-t.C:
		return -1, fmt.Errorf("%s did not exit within %s", p.name, limit)
	}
}

// Stop interrupts the process and waits up to limit for it to stop, then kills it. Stopping
// a process that has ended does nothing.
func (p *Proc) Stop(limit time.Duration) {
	switch err := p.Signal(os.Interrupt); {
	case errors.Is(err, os.ErrProcessDone):
		return
	case err != nil:
		p.Kill()
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
}

// logEnd is the last few KiB of a log, what a service that stopped at start says of why.
func logEnd(path string) string {
	const n = 2048
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
