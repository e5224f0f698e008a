package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
)

// Fleet keeps the job's services running as child processes of one binary, restarting a
// process that dies (as systemd or Kubernetes would): a crash point that exits
// (CAIRN_FAULTS, exit code 3) or a kill -9 is followed by a fresh process.
type Fleet struct {
	Bin string   // the enrich binary
	Env []string // every process's environment, on top of this one's

	mu       sync.Mutex
	procs    map[string]*exec.Cmd // by service set ("" is every service)
	restarts int                  // processes started again after they died
	stopping bool
	wg       sync.WaitGroup
}

// Start runs `enrich service names...` and keeps it running until Stop.
func (f *Fleet) Start(ctx context.Context, log *os.File, names ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs == nil {
		f.procs = map[string]*exec.Cmd{}
	}
	key := fmt.Sprint(names)
	cmd, err := f.spawn(log, names)
	if err != nil {
		return err
	}
	f.procs[key] = cmd
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			err := cmd.Wait()
			f.mu.Lock()
			if f.stopping || ctx.Err() != nil {
				f.mu.Unlock()
				return
			}
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				f.mu.Unlock()
				return
			}
			next, err := f.spawn(log, names)
			if err != nil {
				f.mu.Unlock()
				return
			}
			f.restarts++
			f.procs[key] = next
			cmd = next
			f.mu.Unlock()
		}
	}()
	return nil
}

func (f *Fleet) spawn(log *os.File, names []string) (*exec.Cmd, error) {
	cmd := exec.Command(f.Bin, append([]string{"service"}, names...)...)
	cmd.Env = append(os.Environ(), f.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s service %v: %w", f.Bin, names, err)
	}
	return cmd, nil
}

// Restarts is how many processes were started again after they died.
func (f *Fleet) Restarts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restarts
}

// Kill kills the process of the named services with SIGKILL; the fleet starts it again.
func (f *Fleet) Kill(names ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cmd, ok := f.procs[fmt.Sprint(names)]
	if !ok {
		return fmt.Errorf("no process of %v", names)
	}
	return cmd.Process.Kill()
}

// Stop ends every process (SIGTERM, then what is left is killed when ctx ends) and waits.
func (f *Fleet) Stop(ctx context.Context) {
	f.mu.Lock()
	f.stopping = true
	for _, cmd := range f.procs {
		_ = cmd.Process.Signal(os.Interrupt)
	}
	procs := f.procs
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		for _, cmd := range procs {
			_ = cmd.Process.Kill()
		}
		<-done
	}
}
