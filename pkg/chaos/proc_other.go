//go:build !linux

package chaos

import "os/exec"

// dieWithParent: only Linux kills a child with its parent; elsewhere the driver stops each
// child itself.
func dieWithParent(*exec.Cmd) {}
