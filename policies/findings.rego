# A rule that judges the elements of a list (capabilities, mounts,
# devices, …) reports once, whatever the size of the request: its finding
# carries "count", how many elements are at fault, and a message that
# names the first few of them (_named). A finding without a count stands
# for one. The engine merges any findings of one rule that a bundle still
# reports apart, so a decision carries each rule once.
package sandgate.admission

# _named joins names, the first few elements at fault as the rule spells
# them (array.slice(list, 0, 3): a built-in costs less than a function of
# our own), and says how many of the n in all it leaves out.
_named(names, n) := concat(", ", names) if {
	n <= count(names)
} else := sprintf("%s and %d more", [concat(", ", names), n - count(names)])
