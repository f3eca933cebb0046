"""Prompts for distilling the offline draft, and a disjoint held-out set for measuring it.

Training prompts are built from templates: task x topic x style gives tens of thousands of
distinct chat requests, so the target's answers to them cover many contexts (the earlier
drafts overfit 280 prompts). The held-out prompts are hand-written questions on topics that
appear in no training template; every speedup in the design log is measured on them.
"""
from __future__ import annotations

import random

TASKS = [
    "Explain {topic} to a beginner.",
    "What is {topic}?",
    "Give me three facts about {topic}.",
    "Write a short paragraph about {topic}.",
    "List five key ideas related to {topic}.",
    "Why does {topic} matter?",
    "Write a haiku about {topic}.",
    "Write a short poem about {topic}.",
    "Summarize the history of {topic} in a few sentences.",
    "What are the pros and cons of {topic}?",
    "Give me a simple example that illustrates {topic}.",
    "Write a tweet about {topic}.",
    "How would you teach {topic} to a child?",
    "What are common misconceptions about {topic}?",
    "Write a short story that involves {topic}.",
    "Describe {topic} in one sentence.",
    "Give me some tips for learning about {topic}.",
    "Compare {topic} with something from everyday life.",
    "Write a short dialogue between two friends about {topic}.",
    "What questions should I ask to understand {topic} better?",
    "Write a product description inspired by {topic}.",
    "Create a quiz with three questions about {topic}.",
    "What is the future of {topic}?",
    "Write an email to a colleague about {topic}.",
    "Give a step-by-step guide related to {topic}.",
    "What are the main challenges of {topic}?",
    "Tell me a fun fact about {topic}.",
    "Write a motivational message that mentions {topic}.",
    "How is {topic} used in practice?",
    "Write a short blog post introduction about {topic}.",
    "Explain {topic} using an analogy.",
    "What would a world without {topic} look like?",
    "Write a limerick about {topic}.",
    "Give me a to-do list for a weekend project about {topic}.",
    "Describe the main parts of {topic}.",
    "What are the benefits of {topic} for students?",
    "Write a short speech about {topic}.",
    "Can you define {topic} and give an example?",
    "Write a riddle whose answer is related to {topic}.",
    "What are three books or resources about {topic}?",
]

TOPICS = [
    "photosynthesis", "the water cycle", "gravity", "black holes", "volcanoes", "earthquakes",
    "climate change", "recycling", "renewable energy", "solar panels", "wind turbines", "electric cars",
    "bicycles", "trains", "airplanes", "the internet", "email", "smartphones", "social media", "video games",
    "chess", "football", "basketball", "swimming", "running", "yoga", "meditation", "sleep", "healthy eating",
    "vegetables", "coffee", "tea", "chocolate", "bread baking", "cooking pasta", "gardening", "houseplants",
    "bees", "ants", "dolphins", "elephants", "cats", "dogs", "birds migrating", "rainforests", "deserts",
    "oceans", "coral reefs", "mountains", "rivers", "the moon", "Mars", "the solar system", "stars",
    "telescopes", "microscopes", "cells", "DNA", "vaccines", "the immune system", "the heart", "the brain",
    "memory", "learning a language", "reading books", "writing essays", "public speaking", "time management",
    "teamwork", "leadership", "friendship", "kindness", "saving money", "budgeting", "banks", "taxes",
    "small businesses", "marketing", "job interviews", "remote work", "programming", "Python", "databases",
    "algorithms", "sorting", "machine learning", "robots", "3D printing", "electricity", "magnets",
    "batteries", "light", "sound", "music", "the piano", "the guitar", "painting", "photography", "movies",
    "theater", "poetry", "ancient Egypt", "ancient Rome", "the printing press", "the industrial revolution",
    "democracy", "elections", "museums", "libraries", "maps", "the calendar", "clocks", "numbers",
    "fractions", "geometry", "probability", "statistics", "weather forecasts", "rain", "snow", "rainbows",
    "clouds", "hurricanes", "fire safety", "first aid", "camping", "hiking", "travel", "hotels", "cities",
    "villages", "farming", "wheat", "apples", "bridges", "skyscrapers", "roads", "traffic",
    "plastic pollution", "clean water", "composting", "birthdays", "holidays", "games for children",
    "board games", "puzzles", "origami", "knitting", "fashion", "shoes", "soap", "dentists", "exercise",
    "walking", "stress", "happiness", "curiosity", "patience", "honesty",
]

STYLES = [
    "", " Keep it short.", " Use simple words.", " Answer in a few bullet points.", " Be friendly.",
    " Use at most three sentences.", " Make it fun.", " Be concise and clear.", " Explain it like I am ten.",
    " Give a detailed answer.",
]

# Held out: hand-written, and no training topic or template appears in them.
HELD_OUT = [
    "What causes the seasons on Earth?",
    "How do I make fresh lemonade?",
    "Can you suggest a name for my new goldfish?",
    "Write a thank-you note to my neighbor who watered my plants.",
    "What is the difference between a lake and a pond?",
    "How do submarines dive and come back up? Please explain briefly.",
    "Give me a simple recipe for pancakes.",
    "Why is the sky blue?",
    "What should I pack for a beach trip?",
    "How can I improve my handwriting?",
    "What is the difference between a tortoise and a turtle?",
    "What are some good habits for a productive morning?",
    "Explain what a noun and a verb are.",
    "How does a refrigerator keep food cold?",
    "Write a short bedtime story about a sleepy owl.",
    "What is the tallest animal in the world and why is it so tall?",
    "How do I politely decline an invitation to a party?",
    "Why do cats purr?",
    "Why do leaves change color in autumn?",
    "How can I start learning to draw?",
    "What is a glacier and how does it move?",
    "Give me ideas for a rainy day at home with kids.",
    "How do I take care of a pet hamster?",
    "What does a librarian do all day?",
]

# The held-out prompts split in two: the default method is chosen from τ recorded on TUNING
# (scripts/record_head_quality.py), and speedups are reported on EVALUATION, which chose nothing.
TUNING, EVALUATION = HELD_OUT[:12], HELD_OUT[12:]

# A prompt-lookup-friendly task: the answer should copy most of the prompt.
REWRITE_PARAGRAPH = (
    "The old lighthouse stood at the edge of the cliff for more than a hundred years. Every night its light "
    "swept across the dark water and guided the fishing boats safely home. The keeper, an old man named Tom, "
    "climbed the narrow stairs each evening to clean the lamp and wind the clock. When the town finally "
    "built a modern beacon, the lighthouse fell silent, but the people still walked up the hill on summer "
    "evenings to watch the sun go down behind it."
)
REWRITE_PROMPTS = [
    "Rewrite this paragraph with small edits, fixing nothing but making the wording slightly more vivid:\n\n"
    + REWRITE_PARAGRAPH,
    "Repeat the following paragraph, changing only the name Tom to Sam:\n\n" + REWRITE_PARAGRAPH,
]


def training_prompts(n: int, seed: int = 0) -> list[str]:
    """The first n of all template prompts in a seeded random order (never any held-out prompt)."""
    combos = [(t, p, s) for t in TASKS for p in TOPICS for s in STYLES]
    if n > len(combos):
        raise ValueError(f"asked for {n} training prompts, but the templates make only {len(combos)}")
    random.Random(seed).shuffle(combos)  # a fixed order: asking for more prompts only appends to the list
    return [t.format(topic=p) + s for t, p, s in combos[:n]]


# Chapter 5: the same drafts on open questions and on tasks whose answer is grounded in the input.
EXTRACT_PROMPTS = [
    "Extract the name, the city and the order number from this message, one per line as 'field: value':\n\n"
    "Hello, this is Maria Lopez from Valencia. My order number is 48213 and the blue kettle arrived broken. "
    "Could you send a replacement to Calle Mayor 12, Valencia? Thank you, Maria Lopez.",
    "List every date and the event on that date from this text, one per line:\n\n"
    "The library opens its new reading room on 3 March. A poetry evening follows on 10 March, the book sale "
    "runs on 17 March, and the children's story hour starts again on 24 March.",
]
SUMMARY_PROMPTS = [
    "Summarise this paragraph in two sentences, reusing its words:\n\n" + REWRITE_PARAGRAPH,
    "Summarise this note in one sentence:\n\nThe team meeting moves from Monday to Wednesday at 10 am "
    "because the projector in room 4 is being repaired. Please bring the draft budget and the list of open "
    "questions, and tell Anna by Tuesday if you cannot come.",
]
TASK_PROMPTS = {  # task -> prompts; the first is open-ended, the others copy from their input
    "open question": HELD_OUT[:2],
    "rewrite": REWRITE_PROMPTS,
    "extract fields": EXTRACT_PROMPTS,
    "summarise": SUMMARY_PROMPTS,
}
