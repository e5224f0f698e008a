// Package devproc runs `cairn dev` as a child process, so that a fault's exit is a real
// process exit: the demo and the end-to-end tests start it, wait for its "ready", and watch
// it die or stop it.
package devproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Proc is a running `cairn dev`.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has ended; err is then its Wait error
	err  error
	// Log is the file that holds its standard error.
	Log string
}

// Start runs `bin dev` with env, its standard error in logPath, and waits up to within for
// the "ready" line.
func Start(bin string, env []string, logPath string, within time.Duration) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "dev")
	cmd.Env = env
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s dev: %w", bin, err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				close(ready)
			}
		}
	}()
	p := &Proc{cmd: cmd, done: make(chan struct{}), Log: logPath}
	go func() {
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
		return nil, fmt.Errorf("cairn dev ended before it was ready (%v); see %s", p.err, logPath)
	case <-t.C:
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("cairn dev not ready within %s; see %s", within, logPath)
	}
}

// Wait waits up to limit for the process to end by itself and returns its exit code.
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
		return -1, fmt.Errorf("cairn dev did not exit within %s", limit)
	}
}

// Stop interrupts the process and waits up to limit for it to stop, then kills it. Stopping
// a process that has ended does nothing.
func (p *Proc) Stop(limit time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
