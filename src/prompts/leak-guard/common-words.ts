/**
 * English function words (issue 33): a run of hidden-layer words made only of these ("if you are not sure") is
 * English, not a disclosure; a run needs one word outside this list before it counts at all.
 */
// biome-ignore format: one list, read as prose
export const FUNCTION_WORDS: ReadonlySet<string> = new Set(
  ("a an the and or but if then else when while of to in on at by for with from as into about than so not no yes " +
    "it its this that these those there here is are was were be been being am do does did have has had " +
    "i me my we us our you your yours he him his she her they them their one can could will would should may might must " +
    "what which who whom how why where all any each every some such more most other own same up out over under " +
    "just also only very too s t").split(" "),
);

/**
 * Ordinary English words (issue 33): a run of hidden-layer words made only of these is English, not a disclosure,
 * so the words outside this list are what coverage counts (docs/security.md). The list is the everyday vocabulary of
 * any answer — function words and the commonest verbs and nouns — not the prompts' words.
 */
// biome-ignore format: one list, read as prose
export const COMMON_WORDS: ReadonlySet<string> = new Set(
  ("a an the and or but if then else when while of to in on at by for with from as into about than so not no nor yes " +
    "it its this that these those there here is are was were be been being am do does did done doing have has had having " +
    "i me my mine we us our ours you your yours he him his she her hers they them their theirs one ones someone something " +
    "can could will would shall should may might must need needs ought let lets " +
    "what which who whom whose how why where whenever wherever however whatever whichever " +
    "all any each every some such both either neither few many much more most less least other others another own same " +
    "up down out over under again further once only also just very too even still already yet ever never always often " +
    "before after above below between through during without within along across around off until since because though " +
    "get gets got make makes made take takes took go goes went come comes came see sees saw know knows knew think thinks " +
    "say says said tell tells told ask asks asked give gives gave use uses used find finds found want wants try tries " +
    "work works keep keeps put puts show shows look looks help helps like well way ways thing things time times " +
    "new first last next good best better right left long short same part kind sure now then today people person " +
    "answer answers question questions write writes read reads first second two three").split(" "),
);
