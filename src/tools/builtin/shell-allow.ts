/**
 * `shell.exec`'s allowlist of subcommands and options (issue 20 §6). The command line is parsed the way a
 * POSIX shell splits it — simple commands at `;` `&&` `||` `|` `&` and newlines, words with their quotes and
 * backslashes removed, redirections with their targets — and then:
 *  - no redirection may write into a `.git` folder (any path component `.git`, in any case), to one of git's
 *    config files elsewhere (`~/.gitconfig`, `~/.config/git/config`), or to a target the shell would expand;
 *  - `git` may run only the read-only subcommands below, each with only its listed options (and only the
 *    listed global options: no `-c`, `--git-dir`, `--work-tree`, `--exec-path`); `-C` may not name `.git`;
 *  - `find` may use only the read-only predicates below (no `-exec`, `-delete`, `-fprint`, `-fls`, …);
 *  - in a `git` or `find` command, a word the shell would expand (`$`, unquoted `* ? [`, `{a,b}`) is refused:
 *    it could expand into an option the checks never saw (a file named `-fprint` in the folder).
 * Options are matched exactly (git's abbreviations such as `--out` for `--output` are not on the list), and
 * bundled short options are checked letter by letter. The other default commands (`ls`, `cat`, `echo`, `pwd`,
 * `head`, `tail`, `wc`, `grep`) neither write nor run programs whatever their options; a command an operator
 * adds to the allowlist gets only the redirection rule.
 */

/** One word of a command as the command receives it, and whether the shell would still expand it. */
export interface ShellWord {
  text: string;
  /** An unquoted wildcard or brace list, or a `$` outside single quotes: the shell rewrites the word. */
  expands: boolean;
}

/** One simple command: its words and the files its redirections open for writing. */
export interface SimpleCommand {
  words: ShellWord[];
  writes: ShellWord[];
}

const SEPARATORS = new Set([";", "\n", "\r", "|", "&"]);
const BLANKS = new Set([" ", "\t"]);

/** A brace list the shell expands (`{a,b}`, `{1..3}`); `HEAD@{1}` stays as written. */
const BRACE_LIST = /\{[^{}]*(?:,|\.\.)[^{}]*\}/;

/** The text of a double-quoted string opening before `from` (`\\` escapes `"` `\\` `$` and a backquote), or null if never closed. */
function readDoubleQuoted(cmd: string, from: number): { text: string; expands: boolean; end: number } | null {
  let text = "";
  let expands = false;
  for (let i = from; i < cmd.length; i++) {
    const c = cmd[i] as string;
    if (c === '"') return { text, expands, end: i };
    if (c === "\\" && /["\\$`\n]/.test(cmd[i + 1] ?? "")) {
      if (cmd[i + 1] !== "\n") text += cmd[i + 1];
      i++;
      continue;
    }
    if (c === "$") expands = true;
    text += c;
  }
  return null;
}

/**
 * Splits `cmd` into simple commands as a shell would (quotes and backslashes removed, redirections taken
 * out of the words). Null when a quote is left open.
 */
export function parseCommandLine(cmd: string): SimpleCommand[] | null {
  const commands: SimpleCommand[] = [];
  let current: SimpleCommand = { words: [], writes: [] };
  let i = 0;

  /** Reads one word from `i`: up to a blank, separator or redirection outside quotes. */
  const readWord = (): { word: ShellWord; quoted: boolean } | null => {
    let text = "";
    let raw = "";
    let quoted = false;
    let expands = false;
    while (i < cmd.length) {
      const c = cmd[i] as string;
      if (c === "'") {
        quoted = true;
        const close = cmd.indexOf("'", i + 1);
        if (close < 0) return null;
        text += cmd.slice(i + 1, close);
        i = close + 1;
        continue;
      }
      if (c === '"') {
        quoted = true;
        const inner = readDoubleQuoted(cmd, i + 1);
        if (inner === null) return null;
        if (inner.expands) expands = true;
        text += inner.text;
        i = inner.end + 1;
        continue;
      }
      if (c === "\\") {
        if (cmd[i + 1] !== "\n" && i + 1 < cmd.length) text += cmd[i + 1];
        quoted = true;
        i += 2;
        continue;
      }
      if (BLANKS.has(c) || SEPARATORS.has(c) || c === ">" || c === "<") break;
      if (c === "$" || c === "*" || c === "?" || c === "[") expands = true;
      text += c;
      raw += c;
      i++;
    }
    if (BRACE_LIST.test(raw)) expands = true;
    return { word: { text, expands }, quoted };
  };

  /** Reads a redirection operator at `i` (after an optional fd) and its target. */
  const readRedirection = (): boolean => {
    let op = cmd[i] as string;
    i++;
    while (i < cmd.length && /[>&|<]/.test(cmd[i] as string) && op.length < 3) op += cmd[i++];
    while (i < cmd.length && BLANKS.has(cmd[i] as string)) i++;
    const target = readWord();
    if (target === null) return false;
    const dup = (op === ">&" || op === "<&") && /^(?:\d+|-)?$/.test(target.word.text);
    if (!dup && (op.includes(">") || op === "<>")) current.writes.push(target.word);
    return true;
  };

  while (i < cmd.length) {
    const c = cmd[i] as string;
    if (BLANKS.has(c)) {
      i++;
    } else if (c === "&" && cmd[i + 1] === ">") {
      i++; // `&>file`, `&>>file`: both streams to a file
      if (!readRedirection()) return null;
    } else if (SEPARATORS.has(c)) {
      if (current.words.length > 0 || current.writes.length > 0) commands.push(current);
      current = { words: [], writes: [] };
      i++;
    } else if (c === ">" || c === "<") {
      if (!readRedirection()) return null;
    } else {
      const read = readWord();
      if (read === null) return null;
      // `2>file`: digits right before the operator name a file descriptor, not a word.
      const fd = !read.quoted && /^\d+$/.test(read.word.text) && (cmd[i] === ">" || cmd[i] === "<");
      if (!fd) current.words.push(read.word);
    }
  }
  if (current.words.length > 0 || current.writes.length > 0) commands.push(current);
  return commands;
}

/** Whether a path has a `.git` component (in any case: some filesystems fold it). */
export function touchesGitDir(path: string): boolean {
  return path.split("/").some((part) => part.toLowerCase() === ".git");
}

/** Whether a path is one of git's config files outside `.git/` (`~/.gitconfig`, `~/.config/git/config`, `/etc/gitconfig`). */
export function isGitConfigFile(path: string): boolean {
  const parts = path.toLowerCase().split("/");
  const last = parts.at(-1);
  return last === ".gitconfig" || last === "gitconfig" || (last === "config" && parts.at(-2) === "git");
}

// ---------------------------------------------------------------------------------------------
// git

/** Options a git subcommand may take: bundled short letters, letters whose value follows, long names. */
interface OptionSpec {
  flags: string;
  valued?: string;
  long: readonly string[];
  /** `-5` as a count. */
  numeric?: boolean;
  /** Words that are not options are refused (`git remote add …`). */
  noArguments?: boolean;
}

// biome-ignore format: lists of option names read better packed
const DIFF_LONG = [
  "patch", "no-patch", "stat", "shortstat", "numstat", "name-only", "name-status", "summary", "compact-summary", "raw",
  "unified", "ignore-all-space", "ignore-space-change", "ignore-blank-lines", "ignore-space-at-eol", "diff-filter",
  "find-renames", "find-copies", "no-renames", "full-index", "binary", "patience", "histogram", "minimal",
  "diff-algorithm", "src-prefix", "dst-prefix", "no-prefix", "relative", "word-diff", "word-diff-regex", "color-words",
  "color", "no-color", "no-ext-diff", "no-textconv", "exit-code", "quiet", "abbrev", "dirstat", "check", "text",
  "function-context", "ignore-submodules", "submodule", "merge-base", "cached", "staged", "no-index", "stat-width",
];
// biome-ignore format: lists of option names read better packed
const LOG_LONG = [
  ...DIFF_LONG, "oneline", "graph", "decorate", "no-decorate", "all", "branches", "tags", "remotes", "reverse", "format",
  "pretty", "abbrev-commit", "no-abbrev-commit", "date", "relative-date", "max-count", "skip", "since", "after", "until",
  "before", "author", "committer", "grep", "invert-grep", "all-match", "regexp-ignore-case", "extended-regexp",
  "fixed-strings", "perl-regexp", "merges", "no-merges", "first-parent", "follow", "full-history", "topo-order",
  "date-order", "author-date-order", "left-right", "cherry-pick", "boundary", "ancestry-path", "parents", "children",
  "simplify-by-decoration", "notes", "no-notes", "mailmap", "use-mailmap", "encoding", "walk-reflogs", "source",
  "log-size", "diff-merges", "cc", "no-walk", "count",
];
const LOG: OptionSpec = { flags: "puszwbiEFPRaMCBDcmtW", valued: "nSGUlX", long: LOG_LONG, numeric: true };

/** The git subcommands `shell.exec` runs, all read-only or touching only git's own refs, and their options. */
// biome-ignore format: lists of option names read better packed
export const GIT_SUBCOMMANDS: Readonly<Record<string, OptionSpec>> = {
  status: {
    flags: "sbvz",
    valued: "u",
    long: ["short", "branch", "porcelain", "long", "verbose", "untracked-files", "ignored", "ignore-submodules",
      "ahead-behind", "no-ahead-behind", "renames", "no-renames", "find-renames", "show-stash", "column", "no-column"],
  },
  log: LOG,
  show: LOG,
  diff: { ...LOG, long: DIFF_LONG },
  shortlog: { ...LOG, flags: `${LOG.flags}ne`, long: [...LOG_LONG, "numbered", "summary", "email", "group"] },
  "rev-list": LOG,
  "ls-files": {
    flags: "cdmoiskuztvf",
    valued: "xX",
    long: ["cached", "deleted", "modified", "others", "ignored", "stage", "unmerged", "killed", "directory",
      "no-empty-directory", "eol", "exclude-standard", "exclude", "exclude-from", "exclude-per-directory",
      "error-unmatch", "full-name", "recurse-submodules", "abbrev", "deduplicate", "format"],
  },
  grep: {
    flags: "nivwlLchHoqzrEFGPIapW",
    valued: "efABCm",
    long: ["cached", "untracked", "no-index", "index", "exclude-standard", "no-exclude-standard", "recurse-submodules",
      "text", "ignore-case", "word-regexp", "invert-match", "full-name", "extended-regexp", "basic-regexp",
      "fixed-strings", "perl-regexp", "line-number", "column", "files-with-matches", "name-only",
      "files-without-match", "count", "null", "only-matching", "break", "heading", "show-function",
      "function-context", "context", "after-context", "before-context", "max-depth", "max-count", "threads", "and",
      "or", "not", "all-match", "quiet", "color", "no-color"],
  },
  "rev-parse": {
    flags: "q",
    long: ["show-toplevel", "abbrev-ref", "verify", "short", "git-dir", "git-common-dir", "absolute-git-dir",
      "is-inside-work-tree", "is-inside-git-dir", "is-bare-repository", "show-prefix", "show-cdup",
      "symbolic-full-name", "symbolic", "all", "branches", "tags", "quiet"],
  },
  branch: {
    flags: "arlvdq",
    long: ["all", "remotes", "list", "verbose", "show-current", "contains", "no-contains", "merged", "no-merged",
      "points-at", "sort", "format", "delete", "quiet", "color", "no-color", "ignore-case"],
  },
  tag: { flags: "ln", long: ["list", "contains", "no-contains", "merged", "no-merged", "points-at", "sort", "format", "ignore-case"] },
  blame: {
    flags: "ltsewMCnfpc",
    valued: "L",
    long: ["porcelain", "line-porcelain", "show-name", "show-number", "show-email", "date", "root", "reverse",
      "first-parent", "abbrev", "incremental"],
  },
  describe: {
    flags: "",
    long: ["tags", "all", "always", "abbrev", "long", "exact-match", "contains", "dirty", "broken", "match", "exclude",
      "first-parent", "candidates"],
  },
  "ls-tree": { flags: "drtlz", long: ["name-only", "name-status", "object-only", "full-name", "full-tree", "abbrev", "long", "format"] },
  "cat-file": { flags: "tsep", long: [] },
  "show-ref": { flags: "dsq", long: ["head", "heads", "tags", "dereference", "hash", "abbrev", "verify", "quiet"] },
  "for-each-ref": { flags: "", long: ["format", "sort", "count", "contains", "no-contains", "merged", "no-merged", "points-at"] },
  "merge-base": { flags: "a", long: ["all", "is-ancestor", "fork-point", "independent", "octopus"] },
  "count-objects": { flags: "vH", long: ["verbose", "human-readable"] },
  remote: { flags: "v", long: ["verbose"], noArguments: true },
  version: { flags: "", long: [] },
};

/** git's own options before the subcommand: none that names a program, a config or another repository. */
// biome-ignore format: lists of option names read better packed
const GIT_GLOBAL = new Set([
  "--no-pager", "-P", "--no-replace-objects", "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs",
  "--icase-pathspecs", "--no-optional-locks", "--version",
]);

/** Why `words` (a `git` command) is refused, or undefined. */
function checkGit(words: readonly ShellWord[]): string | undefined {
  let i = 1;
  for (; i < words.length; i++) {
    const word = (words[i] as ShellWord).text;
    if (!word.startsWith("-")) break;
    if (word === "-C") {
      const dir = words[++i]?.text ?? "";
      if (touchesGitDir(dir)) return `"git -C ${dir.slice(0, 64)}" reaches into .git/`;
    } else if (!GIT_GLOBAL.has(word))
      return `"git ${optionName(word)}" is not one of git's allowed global options (${[...GIT_GLOBAL, "-C"].join(", ")})`;
  }
  const sub = words[i]?.text;
  if (sub === undefined) return undefined;
  const spec = Object.hasOwn(GIT_SUBCOMMANDS, sub) ? GIT_SUBCOMMANDS[sub] : undefined;
  if (!spec) return `"git ${sub.slice(0, 32)}" is not an allowed git subcommand (allowed: ${Object.keys(GIT_SUBCOMMANDS).join(", ")})`;
  return checkOptions(`git ${sub}`, words.slice(i + 1), spec);
}

/** The name part of an option word, for messages: `--output` of `--output=x`. */
function optionName(word: string): string {
  return word.split("=")[0]?.slice(0, 48) ?? "";
}

/** Why one of `args` is not an option `spec` allows, or undefined; `--` ends the options. */
function checkOptions(what: string, args: readonly ShellWord[], spec: OptionSpec): string | undefined {
  const refuse = (option: string) => `"${what} ${option}" is not on the allowlist of read-only ${what} options`;
  for (const { text } of args) {
    if (text === "--" || text === "--end-of-options") return undefined;
    if (!text.startsWith("-") || text === "-") {
      if (spec.noArguments) return `"${what}" takes no arguments here ("${text.slice(0, 32)}")`;
      continue;
    }
    if (text.startsWith("--")) {
      if (!spec.long.includes(text.slice(2).split("=")[0] as string)) return refuse(optionName(text));
      continue;
    }
    if (spec.numeric && /^-\d+$/.test(text)) continue;
    for (let k = 1; k < text.length; k++) {
      const letter = text[k] as string;
      if (spec.valued?.includes(letter)) break; // the rest of the word is the value
      if (!spec.flags.includes(letter)) return refuse(`-${letter}`);
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// find

/** find's read-only options, tests and actions (GNU findutils); nothing that writes, deletes or runs. */
// biome-ignore format: lists of option names read better packed
export const FIND_PREDICATES: ReadonlySet<string> = new Set([
  "-H", "-L", "-P", "-depth", "-d", "-maxdepth", "-mindepth", "-mount", "-xdev", "-noleaf", "-daystart", "-follow",
  "-regextype", "-ignore_readdir_race", "-noignore_readdir_race", "-warn", "-nowarn", "-amin", "-anewer", "-atime",
  "-cmin", "-cnewer", "-ctime", "-empty", "-executable", "-false", "-fstype", "-gid", "-group", "-ilname", "-iname",
  "-inum", "-ipath", "-iregex", "-iwholename", "-links", "-lname", "-mmin", "-mtime", "-name", "-newer", "-newermt",
  "-newerct", "-newerat", "-newermm", "-nogroup", "-nouser", "-path", "-perm", "-readable", "-regex", "-samefile",
  "-size", "-true", "-type", "-uid", "-used", "-user", "-wholename", "-writable", "-xtype", "-print", "-print0",
  "-printf", "-ls", "-prune", "-quit", "-not", "-and", "-or", "-a", "-o", "-help", "-version",
]);

/** Why `words` (a `find` command) is refused, or undefined. Values such as `-7` (of `-mtime -7`) pass. */
function checkFind(words: readonly ShellWord[]): string | undefined {
  for (const { text } of words.slice(1)) {
    if (!text.startsWith("-") || /^[-+]\d+[a-zA-Z]?$/.test(text)) continue;
    if (!FIND_PREDICATES.has(text)) return `"find ${text.slice(0, 48)}" is not on the allowlist of read-only find predicates`;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------

const OPTION_RULES: Readonly<Record<string, (words: readonly ShellWord[]) => string | undefined>> = { git: checkGit, find: checkFind };

/** Why the simple command `command` is refused by the option allowlist and the `.git/` rule, or undefined. */
export function refusalFor(command: SimpleCommand): string | undefined {
  for (const target of command.writes) {
    if (target.expands) return `the redirection target "${target.text.slice(0, 64)}" would be expanded by the shell; write to a plain path`;
    if (touchesGitDir(target.text)) return `writing to "${target.text.slice(0, 64)}" is not allowed: nothing may write into .git/`;
    // A config file names programs git runs (core.fsmonitor on `git status`, core.pager, diff drivers).
    if (isGitConfigFile(target.text)) return `writing to "${target.text.slice(0, 64)}" is not allowed: it is a git config file`;
  }
  const first = command.words[0]?.text;
  if (first === undefined) return "a redirection without a command";
  const rule = Object.hasOwn(OPTION_RULES, first) ? OPTION_RULES[first] : undefined;
  if (!rule) return undefined;
  const expanding = command.words.find((w) => w.expands);
  if (expanding)
    return `"${expanding.text.slice(0, 48)}" would be expanded by the shell and could turn into an option; quote it in a ${first} command`;
  return rule(command.words);
}
