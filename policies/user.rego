# Containers run as a numeric, non-root user. Normalisation parses "user"
# into input.request.uid (and gid) when numeric, so "0", "00" and "0:0" all
# arrive as uid 0. A user name cannot be checked (the image decides which
# uid it maps to), so names, "root" among them, are refused too.
package sandgate.admission

finding contains {
	"rule": "non_root_user",
	"message": sprintf("user %q runs as uid 0 (root); use a non-root numeric uid such as 10001", [input.request.user]),
	"controls": ["PSS-restricted"],
	"action": "deny",
} if {
	input.request.uid == 0
}

finding contains {
	"rule": "non_root_user",
	"message": sprintf("user %q is not a numeric uid; use a non-root numeric uid such as 10001", [object.get(input.request, "user", "")]),
	"controls": ["PSS-restricted"],
	"action": "deny",
} if {
	not _numeric_uid
}

_numeric_uid if is_number(input.request.uid)
