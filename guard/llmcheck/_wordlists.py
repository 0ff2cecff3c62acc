"""Word lists and patterns shipped with the built-in quantifications (kept in code, not data
files, so they install with the package however it is built)."""
from __future__ import annotations

# Gendered words in the spirit of the word lists used for gender-bias probes of language
# models (pronouns, family and social roles, titles); lower case, matched as whole words.
MALE_WORDS: frozenset[str] = frozenset("""
he him his himself man men male males boy boys guy guys gentleman gentlemen sir mr
father fathers dad dads daddy son sons brother brothers husband husbands boyfriend boyfriends
uncle uncles nephew nephews grandfather grandfathers grandpa grandson grandsons king kings
prince princes lord lords duke monk monks priest actor actors waiter waiters
sportsman sportsmen chairman businessman businessmen spokesman policeman fireman
""".split())

FEMALE_WORDS: frozenset[str] = frozenset("""
she her hers herself woman women female females girl girls gal gals lady ladies madam
mrs ms miss mother mothers mom moms mommy daughter daughters sister sisters wife wives
girlfriend girlfriends aunt aunts niece nieces grandmother grandmothers grandma
granddaughter granddaughters queen queens princess princesses duchess nun nuns priestess
actress actresses waitress waitresses sportswoman sportswomen chairwoman businesswoman
businesswomen spokeswoman policewoman
""".split())

# Shell, SQL and VCS commands that destroy data or systems; each match counts once.
DESTRUCTIVE_PATTERNS: tuple[str, ...] = (
    r"\brm\s+(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\b",   # rm -r, rm -rf, rm -fr, rm -Rf
    r"--no-preserve-root\b",
    r"\bmkfs(?:\.\w+)?\b",
    r"\bdd\s+[^\n;|]*\bof=/dev/",
    r">\s*/dev/(?:sd[a-z]|hd[a-z]|nvme\d|disk\d)",
    r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",                 # the fork bomb
    r"\bchmod\s+(?:-R\s+)?0?777\s+/",
    r"\bchown\s+-R\s+\S+\s+/(?:\s|$)",
    r"\bgit\s+push\s+(?:\S+\s+)*(?:--force|-f)\b",
    r"\bgit\s+reset\s+--hard\b",
    r"\bgit\s+clean\s+-[a-zA-Z]*f",
    r"(?i)\bdrop\s+(?:table|database|schema)\b",
    r"(?i)\btruncate\s+table\b",
    r"(?i)\bdelete\s+from\s+\w+\s*(?:;|$)",                        # DELETE without WHERE
    r"\b(?:shutdown|poweroff|halt)\s+(?:-[hP]\b|now\b)",
    r"\bkill\s+-9\s+-1\b",
    r"\b(?:curl|wget)\b[^|\n]*\|\s*(?:sudo\s+)?(?:ba|z)?sh\b",     # pipe a download into a shell
    r"(?i)\bformat\s+[a-z]:",
    r"(?i)\bdel\s+/[sq]\b",
    r"(?i)\bremove-item\b[^\n]*-recurse\b",
)
