#!/usr/bin/env bash
# Prints the README's MCA parameter table from what the installed plugin registers
# (`ompi_info --param btl usnic --level 9 --parsable`), so the documentation is generated, not retyped.
# With --check README.md: fails when the README's table differs from the generated one.
set -euo pipefail
table() {
    echo "| parameter | default | level | meaning |"
    echo "|---|---|---|---|"
    ompi_info --param btl usnic --level 9 --parsable | awk -F: '
        $4 == "param" && $3 == "usnic" {
            name = $5; field = $6
            rest = $0; for (j = 1; j <= 6; j++) rest = substr(rest, index(rest, ":") + 1)
            if (!(name in seen)) { seen[name] = 1; order[n++] = name }
            if (field == "value") value[name] = rest
            if (field == "level") level[name] = rest
            if (field == "help") help[name] = rest
        }
        END {
            for (i = 0; i < n; i++) {
                k = order[i]
                if (k ~ /_(major|minor|release)_version$/) continue
                h = help[k]; gsub(/\|/, "\\|", h)
                v = value[k]; if (v == "") v = "(empty)"
                printf "| `%s` | `%s` | %s | %s |\n", k, v, level[k], h
            }
        }'
}
if [ "${1:-}" = --check ]; then
    readme=${2:-README.md}
    if diff <(table) <(sed -n '/^| parameter | default | level | meaning |$/,/^$/p' "$readme" | sed '/^$/d'); then
        echo "1 passed, 0 failed"
    else
        echo "FAIL: the MCA table in $readme is stale; regenerate it with scripts/mca-table.sh"
        echo "0 passed, 1 failed"
        exit 1
    fi
else
    table
fi
