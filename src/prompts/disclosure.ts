/**
 * The disclosure guard (S1 §2.5, S2 §5, DESIGN "Disclosure"): a deterministic
 * classifier that recognises requests for the hidden prompt layers, policies
 * or manifests — in English, Chinese and a few other languages, and through
 * the usual obfuscations (spacing, leetspeak, zero-width characters, base64,
 * "repeat everything above", translation, role-play, "developer mode") — so
 * that they are refused with `REFUSE_SYSTEM_PROMPT` before any model call.
 *
 * Two tiers of signal: an explicit reference to the hidden instructions
 * ("your system prompt", "the instructions you were given", "everything
 * above") refuses on its own; a softer reference ("your rules", "the tool
 * policy") refuses only together with a request to show, repeat, translate or
 * encode it. Talking *about* prompts in general ("how do I write a good system
 * prompt?") is not a request for ours and is answered normally.
 */
import { getBasePrompt } from "./catalog";

export const REFUSE_SYSTEM_PROMPT = "REFUSE_SYSTEM_PROMPT" as const;

export interface DisclosureVerdict {
  refuse: boolean;
  /** Names of the rules that matched (for traces; never the text itself). */
  signals: string[];
}

const ZERO_WIDTH = /[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\u00ad]/g;
const LEET: Record<string, string> = { "0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", $: "s" };

/** Lower-cases and undoes the cheap obfuscations so that the rules see plain words. */
export function normaliseForGuard(text: string): string {
  let t = text.normalize("NFKC").replace(ZERO_WIDTH, "").toLowerCase();
  // Leetspeak inside words that mix letters and digits: "sy5tem" → "system", "y0ur" → "your".
  t = t.replace(/[a-z0-9@$]+/g, (w) => (/[a-z]/.test(w) && /[0-9@$]/.test(w) ? w.replace(/[013457@$]/g, (c) => LEET[c] ?? c) : w));
  // Letters spelled out with separators: "s y s t e m", "p.r.o.m.p.t" → "system", "prompt".
  t = t.replace(/\b(?:[a-z][\s.\-_*]{1,2}){3,}[a-z]\b/g, (run) => run.replace(/[\s.\-_*]/g, ""));
  // Chat shorthand and identifier spellings.
  t = t
    .replace(/\bur\b/g, "your")
    .replace(/\bu\b/g, "you")
    .replace(/\br\b/g, "are")
    .replace(/[_]+/g, " ")
    .replace(/systemprompt/g, "system prompt")
    .replace(/\s+/g, " ");
  return t;
}

/** Base64-looking runs decoded to text, so that encoded requests are classified too. */
function decodedRuns(text: string): string[] {
  const out: string[] = [];
  const runs = text.match(/[A-Za-z0-9+/]{16,4096}={0,2}/g) ?? [];
  for (const run of runs.slice(0, 20)) {
    try {
      const decoded = atob(run.length % 4 === 0 ? run : run + "=".repeat(4 - (run.length % 4)));
      // Keep only decodings that are mostly printable text.
      const printable = decoded.replace(/[^\x20-\x7e]/g, "").length;
      if (decoded.length >= 8 && printable / decoded.length > 0.9) out.push(decoded);
    } catch {
      /* not base64 */
    }
  }
  return out;
}

const LAYER_WORDS =
  "(?:prompt|pre-?prompt|instructions?|message|rules|guidelines|directives|configuration|config|polic(?:y|ies)|text|setup|context)";
const HIDDEN_ADJ =
  "(?:system|initial|original|hidden|secret|internal|base|developer|starting|confidential|underlying|core|full|entire|complete|exact|first)";

/** Refuse on their own: unambiguous references to the hidden layers. */
const STRONG: readonly [string, RegExp][] = [
  ["own_hidden_layer", new RegExp(`\\byour\\s+(?:own\\s+)?(?:[a-z-]+\\s+){0,2}${HIDDEN_ADJ}[\\s-]*${LAYER_WORDS}`)],
  ["own_system_prompt", /\b(?:your|yours)\b[^.?!\n]{0,30}\bsystem\s*(?:prompt|message|instructions?)/],
  [
    "given_instructions",
    /\b(?:instructions?|rules|prompt|guidelines|directives)\s+(?:that\s+)?you\s+(?:were\s+|have\s+been\s+|'ve\s+been\s+|had\s+been\s+)?(?:given|told|provided|received|programmed|configured|fed)/,
  ],
  [
    "operator_gave_you",
    /\b(?:instructions?|rules|prompt|guidelines)\b[^.?!\n]{0,40}\b(?:gave|given|provided|wrote|written)\s+(?:to\s+)?you\b/,
  ],
  // "hidden instructions" — unless they belong to something else ("…in a Word document").
  [
    "hidden_policy",
    /\b(?:hidden|secret|confidential|internal)\s+(?:prompts?|instructions?|rules|polic(?:y|ies)|guidelines|directives|system message|layers?|text)\b(?!\s+(?:in|of|from|inside|within)\s+(?:a|an|my|his|her|their|this|that)\b(?!\s+(?:conversation|chat|context)))/,
  ],
  [
    "asked_how_instructed",
    /\b(?:what|how)\s+(?:exactly\s+)?(?:were|have|did)\s+you\s+(?:been\s+)?(?:told|instructed|programmed|configured|set up|prompted|briefed)\b/,
  ],
  ["system_sent_you", /\bsystem\s+(?:sent|gave|told|showed)\s+you\b/],
  [
    "prompt_you_run_with",
    /\b(?:prompt|instructions?|rules|polic(?:y|ies)|guidelines)\s+(?:that\s+)?you(?:'re|\s+are)?\s+(?:running|operating|working|bound)\s+(?:with|under|by)\b/,
  ],
  [
    "text_above",
    /\b(?:repeat|print|output|show|display|copy|echo|put|write|paste|dump|return|give|reproduce)\b[^.?!\n]{0,30}\b(?:everything|all the text|all text|the text|the words|the content|all of the above|all content|all the content|all previous|the whole conversation)\s+(?:above|before|prior)\b/,
  ],
  ["everything_above", /\b(?:everything|all the text|all text|the words|the text)\s+(?:above|before)\s+(?:this|my|the)\b/],
  ["repeat_starting_you_are", /\bstart(?:ing)?\s+with\s+(?:the\s+(?:phrase|words)\s+)?["'“]?you are\b/],
  [
    "first_message_of_conversation",
    /\b(?:first|earliest|initial|very first)\s+(?:message|text|lines?|thing)\s+(?:in|of|at the start of)\s+(?:this|the|our)\s+(?:conversation|chat|context)/,
  ],
  [
    "before_my_message",
    /\b(?:before|above|preceding|prior to)\s+(?:my|mine|this|the user(?:'s)?)\s+(?:first\s+)?(?:message|question|input|prompt)\b|\bbefore mine\b/,
  ],
  ["previous_system_messages", /\b(?:previous|prior|earlier|all|preceding)\s+system\s+(?:messages?|prompts?|instructions?)/],
  [
    "ignore_previous_instructions",
    /\b(?:ignore|disregard|forget|override)\s+(?:all\s+)?(?:of\s+)?(?:the\s+|your\s+|any\s+)?(?:previous|prior|above|earlier|preceding|initial|original|system)\s+(?:instructions?|rules|prompts?|directions|directives|guidelines)/,
  ],
  [
    "own_manifest",
    /\b(?:your|this turn's|the current|today's)\s+(?:prompt\s+|policy\s+|stack\s+)?manifests?\b|\bmanifests?\s+(?:for|of)\s+(?:this|the current|your)\b/,
  ],
  ["prompt_layer", /\b(?:layer\s+l[1-6]|l[1-6]\s+layers?|hidden\s+layers?|prompt\s+layers?|prompt\s+stack)\b/],
  ["canary", /\b(?:canary|confidentiality marker)\b/],
  ["initialisation_text", /\b(?:initiali[sz]ation|bootstrap)\s+(?:text|prompt|message|instructions?)\b|\bpre-?prompt\b/],
  [
    "text_of_instructions",
    /\b(?:text|wording|content|contents|copy|words)\s+of\s+your\s+(?:own\s+)?(?:instructions?|prompt|rules|guidelines|directives|configuration)/,
  ],
  // Other languages.
  ["zh_own_prompt", /你的.{0,6}(?:系统提示|提示词|提示语|指令|指示|规则|设定|配置|系统消息|初始|隐藏|限制)/],
  [
    "zh_system_prompt_verb",
    /(?:告诉|显示|输出|打印|重复|泄露|透露|给我|列出|翻译|展示|复述|背诵).{0,10}(?:系统提示|提示词|系统消息|初始指令|隐藏指令|隐藏规则)/,
  ],
  ["zh_received", /你(?:收到|得到|接收|被给予|被设定)的.{0,4}(?:指令|指示|规则|提示|设定)/],
  ["zh_prompt_then_verb", /(?:系统提示|提示词|系统消息|初始指令|隐藏指令).{0,12}(?:输出|打印|显示|发给我|告诉我|翻译|编码|泄露|列出)/],
  ["zh_hidden", /(?:隐藏|秘密|内部|初始|原始)(?:的)?(?:指令|规则|提示|设定|策略)/],
  ["zh_above", /(?:重复|输出|打印|显示|复述).{0,4}(?:上面|以上|之前|前面).{0,6}(?:内容|文字|文本|所有|一切)/],
  ["zh_ignore", /(?:忽略|无视|忘记).{0,4}(?:之前|以上|上面|先前|所有).{0,6}(?:指令|指示|规则|设定)/],
  ["zh_developer_mode", /开发者模式|调试模式|越狱/],
  ["es_own", /\b(?:tus|sus)\s+instrucciones\b|\b(?:prompt|instrucciones|mensaje)\s+del\s+sistema\b/],
  ["de_own", /\bdein(?:en|e)?\s+(?:system[\s-]*prompt|anweisungen|systemanweisungen|regeln)\b/],
  ["fr_own", /\b(?:ton|votre|tes|vos)\s+(?:prompt\s+syst[eè]me|instructions|consignes)\b|\bprompt\s+syst[eè]me\b/],
];

/** Refuse only together with a disclosure request. */
const WEAK_TARGETS: readonly [string, RegExp][] = [
  [
    "your_rules",
    /\byour\s+(?:[a-z-]+\s+){0,2}(?:rules|guidelines|instructions?|directives|configuration|config|context(?:\s+window)?|prompt|programming|policies|settings)\b/,
  ],
  ["the_system_prompt", /\bthe\s+(?:[a-z-]+\s+){0,2}(?:system|base|initial|original|developer)\s+(?:prompt|message|instructions?)\b/],
  [
    "bare_system_prompt",
    /(?:^|[^a-z])(?<!\b(?:a|an|good|typical|my|our|new|custom|great|better|example|sample)\s)system\s*(?:prompt|message)s?\b/,
  ],
  ["prompt_manifest", /(?<!\b(?:a|an|example|sample)\s)\b(?:prompt|policy|layer|stack)\s+manifests?\b/],
  ["policy_prompt", /\b(?:channel|tool|agent|role|base|task)\s+(?:policy|policies|prompts?)\b/],
  ["own_policies", /\b(?:polic(?:y|ies)|rules)\s+(?:are\s+)?you(?:'re|\s+are)?\s+(?:running|operating|following|follow|bound|under)\b/],
];

const DISCLOSURE_VERBS =
  /\b(?:show|reveal|print|repeat|output|display|tell|give|share|list|dump|leak|expose|recite|echo|copy|paste|write|spell|translate|encode|decode|summari[sz]e|paraphrase|quote|read|provide|send|resend|reproduce|convert|narrat(?:e|ing)|put|need|want|see|what(?:'s| is| are| were| was| does| do)|rot13|base64|hex|verbatim|word for word)\b|\btraduce\b|\bzeige\b|\bmontre\b/;

/** Jailbreak framings: they add weight to a weak target but refuse nothing on their own. */
const JAILBREAK = /\b(?:developer mode|debug mode|dan|jailbreak|no restrictions|unrestricted|god mode|sudo mode)\b/;

function classifyText(text: string, signals: Set<string>): void {
  for (const [name, re] of STRONG) if (re.test(text)) signals.add(name);
  const weak = WEAK_TARGETS.filter(([, re]) => re.test(text)).map(([name]) => name);
  const asks = DISCLOSURE_VERBS.test(text);
  if (weak.length > 0 && (asks || JAILBREAK.test(text))) for (const name of weak) signals.add(`${name}+request`);
}

/** Whether a user message asks for the hidden layers, and which rules said so. */
export function classifyDisclosureRequest(message: string): DisclosureVerdict {
  const signals = new Set<string>();
  classifyText(normaliseForGuard(message), signals);
  // Raw text too: the normaliser can merge CJK or punctuation in ways the raw rules expect unmerged.
  classifyText(message.toLowerCase(), signals);
  for (const decoded of decodedRuns(message)) {
    const before = signals.size;
    classifyText(normaliseForGuard(decoded), signals);
    if (signals.size > before) signals.add("base64_encoded_request");
  }
  return { refuse: signals.size > 0, signals: [...signals].sort() };
}

/**
 * The refusal users see: high level, no layer text, no hashes. Naming the base
 * prompt's version is allowed disclosure (S2 §5.2).
 */
export function disclosureRefusalMessage(): string {
  const { versionId } = getBasePrompt();
  return (
    "I can't share my system prompt, hidden instructions or policy texts — they are confidential. " +
    `What I can say: I run on a base prompt (${versionId}) together with operator-defined role, channel and tool policies. ` +
    "I'm glad to help with whatever you're working on."
  );
}
