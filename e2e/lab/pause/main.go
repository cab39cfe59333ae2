// pause: the sandbox ("pause") image's only program for the lab's real nodes (real-nodes.sh).
// It holds the pod's namespaces: it sleeps until SIGTERM or SIGINT, then exits 0. As PID 1 of a
// pod that shares its process namespace it also reaps orphaned children.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
