package chaos

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the child die with the driver: a driver killed leaves no service
// running against its trial's server.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
