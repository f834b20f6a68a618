"""Twenty one-sentence passages on unrelated topics (a corpus whose passages are little alike)."""

TOPICS = [
    "Cats sleep for most of the day and purr when they are content on a warm lap.",
    "The volcano erupted at dawn and covered the nearby village in grey ash.",
    "Sourdough needs a starter of flour and water that ferments for several days.",
    "The striker scored twice in the final minutes to win the championship.",
    "Glaciers carve deep valleys as they slowly advance and retreat over centuries.",
    "A violin is tuned in fifths, from the low G string up to the high E string.",
    "Compound interest makes savings grow faster the longer they are left untouched.",
    "Tomatoes ripen best in full sun with regular watering at the roots.",
    "The treaty ended the war and redrew the borders of three kingdoms.",
    "Owls hunt at night, locating mice by sound alone in complete darkness.",
    "Electric cars use regenerative braking to recharge the battery while slowing.",
    "The marathon route climbs two steep hills before the long flat finish.",
    "Honey bees communicate the direction of flowers with a waggle dance.",
    "Chess openings such as the Sicilian aim to fight for the centre early.",
    "The lighthouse keeper trimmed the lamp wick every evening before dusk.",
    "Coral reefs bleach when warm water drives out the algae living in them.",
    "A suspension bridge hangs its deck from cables slung between tall towers.",
    "Knitting a scarf takes a ball of wool, two needles and a simple stitch.",
    "The comet returns every seventy-six years, its tail pointing away from the sun.",
    "Espresso is brewed by forcing hot water through finely ground coffee.",
]
