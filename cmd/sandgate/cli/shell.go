package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/gateway/api"
)

// newSessionShellCmd builds `sandgate session shell ID`: a terminal in
// the session over GET /v1/sessions/{id}/terminal, the local terminal in
// raw mode (restored on exit, whatever ends it), its size followed.
func newSessionShellCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "shell ID",
		Short: "Open a terminal in a session",
		Long: `Open a terminal (a pseudo-terminal of the sandbox, the session's shell as its
user, in its workdir) in session ID. The local terminal is put in raw mode, so
that Ctrl-C and the like reach the session's programs, and restored when the
shell exits or the connection ends. Opening it is admitted by policy with
operation "terminal" and recorded (terminal.opened, terminal.closed).

Exit status: the shell's; 126 when policy refuses the terminal, 125 when it
cannot be opened.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShell(cmd.Context(), a, args[0])
		},
	}
}

func runShell(ctx context.Context, a *app, id string) error {
	if a.cfg.Token == "" {
		return &ExitError{Code: exitPlatform, Message: "SANDGATE_TOKEN is not set: export the bearer token the gateway gave you"}
	}
	in, isTTY := a.stdin.(*os.File)
	isTTY = isTTY && isTerminal(in)
	rows, cols := 24, 80
	if isTTY {
		if ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 {
			rows, cols = int(ws.Row), int(ws.Col)
		}
	}
	u, err := terminalURL(a.cfg.URL, id, rows, cols)
	if err != nil {
		return &ExitError{Code: exitPlatform, Message: err.Error()}
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + a.cfg.Token}}})
	if err != nil {
		return shellRefused(a, resp, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	if isTTY {
		restore, err := makeRaw(int(in.Fd()))
		if err != nil {
			return &ExitError{Code: exitPlatform, Message: "raw mode: " + err.Error()}
		}
		defer restore()
		go followSize(ctx, conn, int(in.Fd()))
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	go sendInput(ctx, conn, a.stdin)
	code, err := receiveOutput(ctx, conn, a.stdout)
	if err != nil {
		return &ExitError{Code: exitPlatform, Message: "\r\nthe terminal ended: " + err.Error()}
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

func terminalURL(base, id string, rows, cols int) (string, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	u.Path += "/v1/sessions/" + url.PathEscape(id) + "/terminal"
	u.RawQuery = url.Values{"rows": {fmt.Sprint(rows)}, "cols": {fmt.Sprint(cols)}}.Encode()
	return u.String(), nil
}

// shellRefused explains a terminal the gateway did not open.
func shellRefused(a *app, resp *http.Response, err error) error {
	if resp == nil || resp.StatusCode < 400 {
		return &ExitError{Code: exitPlatform, Message: fmt.Sprintf("cannot open a terminal at %s: %v", a.cfg.URL, err)}
	}
	var body api.ErrorBody
	if resp.Body != nil {
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
	}
	if body.Error.Code == "" {
		return &ExitError{Code: exitPlatform, Message: fmt.Sprintf("the gateway refused the terminal: %s", resp.Status)}
	}
	return submitError(a, body.Error.Err())
}

// sendInput sends what in gives as the terminal's input until it ends.
func sendInput(ctx context.Context, conn *websocket.Conn, in io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if conn.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// receiveOutput writes the terminal's output to out and returns its
// program's exit code.
func receiveOutput(ctx context.Context, conn *websocket.Conn, out io.Writer) (int, error) {
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return 0, nil
			}
			return 0, err
		}
		if typ == websocket.MessageBinary {
			if _, err := out.Write(b); err != nil {
				return 0, err
			}
			continue
		}
		var m struct {
			Type string `json:"type"`
			Code *int   `json:"code"`
		}
		if json.Unmarshal(b, &m) == nil && m.Type == "exit" && m.Code != nil {
			conn.Close(websocket.StatusNormalClosure, "")
			return *m.Code, nil
		}
	}
}

// followSize sends the local terminal's size whenever it changes.
func followSize(ctx context.Context, conn *websocket.Conn, fd int) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
			if err != nil {
				continue
			}
			b, _ := json.Marshal(map[string]any{"type": "resize", "rows": ws.Row, "cols": ws.Col})
			if conn.Write(ctx, websocket.MessageText, b) != nil {
				return
			}
		}
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal fd in raw mode (as cfmakeraw does) and
// returns what restores it.
func makeRaw(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
