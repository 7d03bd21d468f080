package images_test

import (
	"context"
	"testing"

	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
)

// TestRecipeCheckUnderSeccomp: a recipe's check runs the freshly built
// image's code, so its container is held to the run path's seccomp
// profile too. In the python image, ptrace(PTRACE_TRACEME), which
// Docker's default profile lets through, and io_uring_setup must fail
// with EPERM.
func TestRecipeCheckUnderSeccomp(t *testing.T) {
	im := newTestImages(t)
	b := executortest.RequireRecipeImage(t, "python")
	check := images.RecipeCheck{
		Name: "denied calls",
		Command: []string{"python3", "-c", `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(0, 0, None, None)
e = ctypes.get_errno()
u = libc.syscall(425, 1, ctypes.create_string_buffer(120))
ue = ctypes.get_errno()
print("ptrace", r, e, "io_uring_setup", u, ue)
print("denied" if (r, e, u, ue) == (-1, 1, -1, 1) else "allowed")
`},
		Expect: "denied",
	}
	if err := im.RunCheck(context.Background(), b.ID, check); err != nil {
		t.Fatalf("check: %v; want ptrace and io_uring_setup refused with EPERM", err)
	}
}
