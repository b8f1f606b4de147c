"""A small seeded grammar of movie reviews: the bundled corpus of the embedded default.

Reviews are positive, negative or mixed, 1-3 sentences, so a model pre-trained on them writes
readable continuations whose sentiment RLHF can move. Every choice draws from one `random.Random`.
"""

from __future__ import annotations

import random

NOUNS = [
    "movie", "film", "story", "plot", "acting", "cast", "script", "dialogue", "soundtrack",
    "music", "ending", "direction", "cinematography", "pacing", "humor", "villain", "hero",
    "final act", "first half", "screenplay", "lead performance", "camera work", "editing",
]
FILM_WORDS = ["movie", "film", "picture", "story"]
ADJECTIVES = {
    "pos": [
        "wonderful", "brilliant", "beautiful", "delightful", "excellent", "superb", "charming",
        "moving", "fantastic", "great", "lovely", "touching", "funny", "stunning", "impressive",
        "enjoyable", "perfect", "clever", "fresh", "inspiring", "amazing", "good", "sweet",
    ],
    "neg": [
        "terrible", "boring", "awful", "dull", "weak", "painful", "horrible", "bad", "stupid",
        "messy", "lifeless", "disappointing", "ugly", "annoying", "poor", "bland", "tedious",
        "forgettable", "sad", "silly", "lazy", "confusing", "worst",
    ],
    "neu": [
        "long", "slow", "quiet", "simple", "strange", "loud", "familiar", "short", "dark",
        "old-fashioned", "unusual", "serious", "modest",
    ],
}
ADVERBS = ["", "", "", "really ", "quite ", "very ", "truly ", "rather ", "surprisingly "]
OPENERS = ["", "", "", "Honestly, ", "Overall, ", "In the end, ", "To be fair, ", "Sadly, ",
           "Thankfully, ", "At times, "]
LINKING_VERBS = ["was", "is", "felt", "seemed"]
FEEL_VERBS = {
    "pos": ["loved", "enjoyed", "adored", "liked", "admired"],
    "neg": ["hated", "disliked", "could not stand", "regretted watching", "struggled with"],
}
REACTIONS = {
    "pos": ["laugh", "smile", "cry happy tears", "think", "feel hopeful"],
    "neg": ["cringe", "yawn", "fall asleep", "check my phone", "want to leave"],
}
VERDICTS = {
    "pos": ["I would gladly watch it again.", "I would recommend it to my friends.",
            "I will definitely see it twice.", "It is worth every minute.",
            "I left the theater smiling."],
    "neg": ["I would not recommend it to anyone.", "I want those two hours back.",
            "I will never watch it again.", "It is a waste of time.",
            "I left the theater early."],
}
NAMES = ["Anna Clarke", "Tom Hayes", "Maria Lopez", "James Reed", "Lucy Chen", "David Moore",
         "Emma Stone", "Paul Grant", "Sara Kim", "Jack Turner", "Nina Patel", "Omar Haddad"]
ROLES = ["detective", "mother", "young soldier", "lonely king", "teacher", "pilot", "doctor",
         "farmer", "thief", "singer"]
PREMISES = [
    "a young woman who moves to the city", "an old man who finds a strange map",
    "two brothers who run a small farm", "a detective who chases a clever thief",
    "a family that spends a summer by the sea", "a teacher who starts a school band",
    "a pilot who crashes on an island", "a girl who befriends a lost dog",
    "a singer who returns to her home town", "a soldier who comes back from the war",
]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _adjective(rng: random.Random, mood: str) -> str:
    """Adjective for a sentence of a review of the given mood: pos, neg or mixed."""
    if mood == "mixed":
        mood = rng.choice(["pos", "neg", "neu"])
    elif rng.random() < 0.15:
        mood = "neu"
    return rng.choice(ADJECTIVES[mood])


def _polar(rng: random.Random, mood: str) -> str:
    return rng.choice(["pos", "neg"]) if mood == "mixed" else mood


def _sentence(rng: random.Random, mood: str) -> str:
    kind = rng.randrange(9)
    noun, noun2 = rng.sample(NOUNS, 2)
    adj, adj2 = _adjective(rng, mood), _adjective(rng, mood)
    if kind == 0:
        return f"The {noun} {rng.choice(LINKING_VERBS)} {rng.choice(ADVERBS)}{adj}."
    if kind == 1:
        return f"{rng.choice(OPENERS)}the {noun} was {adj}, and the {noun2} was {adj2}.".capitalize()
    if kind == 2:
        return f"I {rng.choice(FEEL_VERBS[_polar(rng, mood)])} this {rng.choice(FILM_WORDS)}."
    if kind == 3:
        word = rng.choice(FILM_WORDS)
        return f"It is {_article(adj)} {adj} {word} with {_article(adj2)} {adj2} {noun2}."
    if kind == 4:
        return f"The {noun} made me {rng.choice(REACTIONS[_polar(rng, mood)])}."
    if kind == 5:
        name, role = rng.choice(NAMES), rng.choice(ROLES)
        return f"{name} gives {_article(adj)} {adj} performance as the {role}."
    if kind == 6:
        return f"The story follows {rng.choice(PREMISES)}."
    if kind == 7:
        return rng.choice(VERDICTS[_polar(rng, mood)])
    return f"Some scenes were {adj}, but the {noun} was {rng.choice(ADVERBS)}{adj2}."


def review(rng: random.Random) -> str:
    """One review of 1-3 sentences with a positive, negative or mixed mood."""
    mood = rng.choices(["pos", "neg", "mixed"], weights=[0.4, 0.4, 0.2])[0]
    return " ".join(_sentence(rng, mood) for _ in range(rng.randint(1, 3)))


def prompt_from(text: str, rng: random.Random) -> str:
    """A review opening: its first 2 to 5 words."""
    words = text.split()
    return " ".join(words[: rng.randint(2, min(5, len(words)))]).rstrip(",.")
